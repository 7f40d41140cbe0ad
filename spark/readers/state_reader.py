"""The "dstl-state" data source: a checkpoint's state at a batch, as a DataFrame.

    spark.read.format("dstl-state").option("batchId", 7).load("/path/to/checkpoint")

One Spark partition per state partition; each task restores its store into a private
temporary directory (never the running query's), reads every state variable and removes it.
Keys and values are JSON text (bytes as base64 strings), so any stored value fits one schema.

A PySpark processor's state (schema-typed, with a schema history) is shown in the schema in
force at the batch read: a value written with an older schema id is projected onto it by field
name, as the query at that batch reads it. `schema_id` is the id a value was written with (a
list: the newest of its elements'), `value_schema` the JSON of the schema it is shown in; both
are null for state without schemas.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.naming import split_store_id
from pyspark_dstl.backend.lineage.schema_records import SchemaHistory, history_at
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_groups import key_groups_in
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.codec.evolution import VersionedRowCodec
from pyspark_dstl.spark.codec.schema_history import value_schemas, value_struct
from pyspark_dstl.spark.codec.values import (
    Expiring,
    decode_key,
    decode_value_with_expiry,
    iter_elements,
    split_map_key,
)
from pyspark_dstl.spark.pyspark_versions import register_data_source
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.spark_errors import StateDecodingError
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects
from pyspark_dstl.spark.time.timers import BY_EXPIRY_CF, BY_KEY_CF, EXPIRY_WIDTH, expiry_of

SOURCE_NAME = "dstl-state"
SCHEMA = ("partition INT, state_variable STRING, kind STRING, key STRING, map_key STRING, "
          "value STRING, expires_at_ms LONG, schema_id INT, value_schema STRING")
SETTINGS_OPTION = "settings"


class StatePartition(InputPartition):
    def __init__(self, partition: int, info: str, history: str | None = None,
                 grouped: bool = True) -> None:
        super().__init__(partition)
        self.partition = partition
        self.info = info
        self.history = history  # SchemaHistory JSON at the batch; None without schemas
        self.grouped = grouped  # keys start with their key group (the entry records a layout)


class DstlStateDataSource(DataSource):
    """Options: path (the checkpoint), batchId (default: the newest committed batch),
    operatorName (default "stateful"), settings (JSON object of spark.dstl.* settings, e.g.
    the S3 endpoint; `read_state` fills it from the session)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        freeze_imported_objects()  # planned in a reused Python worker too
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return StateReader(dict(self.options))


class StateReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        from pyspark_dstl.spark.locations import to_url

        lowered = {str(k).lower(): v for k, v in options.items()}
        path = lowered.get("path")
        if not path:
            raise ConfigError("dstl-state: give the checkpoint location, e.g. load(path)")
        self.url = to_url(path)
        self.operator = lowered.get("operatorname") or "stateful"
        raw_batch = lowered.get("batchid")
        try:
            self.batch_id = None if raw_batch in (None, "") else int(str(raw_batch))
        except ValueError as exc:
            raise ConfigError(f"dstl-state option batchId: expected an integer, got "
                              f"{raw_batch!r}") from exc
        try:
            settings = json.loads(lowered.get(SETTINGS_OPTION) or "{}")
        except ValueError as exc:
            raise ConfigError(f"dstl-state option settings: not a JSON object: {exc}") from exc
        self.settings = {str(k): str(v) for k, v in settings.items()
                         if not str(k).startswith(QUERY_PREFIX)}
        DstlSettings.from_settings(self.settings)  # fail here, naming the key, if invalid

    def partitions(self) -> list[InputPartition]:
        options = BackendSettings.from_mapping(self.settings)
        with ChangelogService(self.url, options.changelog) as storage:
            log = CommitLog(storage)
            if self.batch_id is None:
                latest = log.latest()
                if latest is None:
                    raise ConfigError(f"dstl-state: no committed batch under {self.url!r}")
                entry = latest[1]
            else:
                entry = log.read(self.batch_id)
            history = history_at(storage, self.operator, entry)
        shipped = None if history is None else json.dumps(history.to_dict())
        commit = entry.operators.get(self.operator)
        if commit is None:
            raise ConfigError(f"dstl-state: batch {entry.batch_id} under {self.url!r} has no "
                              f"operator {self.operator!r} (has {sorted(entry.operators)})")
        grouped = key_groups_in(entry.extra) is not None
        return [StatePartition(p, json.dumps(info.to_dict()), shipped, grouped)
                for p, info in sorted(commit.stores.items())]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, StatePartition)
        freeze_imported_objects()
        info = StoreCommit.from_dict(json.loads(partition.info))
        readers = value_readers(None if partition.history is None else
                                SchemaHistory.from_dict(json.loads(partition.history)))
        operator, number = split_store_id(info.store_id)
        scratch = tempfile.mkdtemp(prefix="dstl-state-reader-")
        settings = {**self.settings, "spark.dstl.stateStore.localDir": scratch}
        try:
            with StateBackend(BackendSettings.from_mapping(settings)) as backend:
                store = backend.provider(self.url, operator, number).get_store(info.version,
                                                                                info)
                try:
                    rows = [row for cf in store.column_families()
                            for row in state_rows(number, cf, store.iterator(cf), readers,
                                                  grouped=partition.grouped)]
                finally:
                    store.abort()
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        yield from rows


ValueReader = Callable[[Any], tuple[int, Any]]


def value_readers(history: SchemaHistory | None) -> dict[str, tuple[ValueReader, str]]:
    """Per schema-typed state variable: (stored value -> (its schema id, its fields in the
    schema in force), that schema's JSON). A variable the current schema no longer declares
    is shown in the newest schema that declared it."""
    if history is None:
        return {}
    readers: dict[str, tuple[ValueReader, str]] = {}
    for record in history.chain():  # newest first
        for name, declared in record.declarations.variables.items():
            if name in readers:
                continue
            codec = VersionedRowCodec(value_struct(declared), name, record.schema_id,
                                      value_schemas(history, name))
            readers[name] = (codec.current_fields, declared.value_schema)
    return readers


def _plain(value: Any) -> tuple[int | None, Any]:
    return None, value


def state_rows(partition: int, cf: str, items: Iterator[tuple[bytes, bytes]],
               readers: Mapping[str, tuple[ValueReader, str]] | None = None,
               *, grouped: bool = True) -> Iterator[tuple[Any, ...]]:
    """Rows of the reader's schema for one column family of a store; `grouped`: its keys
    start with their key group (False: a batch written before key groups)."""
    kind, _, name = cf.partition("/")
    reader, shown_in = (readers or {}).get(name, (_plain, None))
    for key, raw in items:
        if kind == "value":
            stored, expires = decode_value_with_expiry(raw, name)
            schema_id, value = reader(stored)
            yield (partition, name, kind, _json(list(decode_key(key, name, grouped=grouped))), None,
                   _json(value), expires, schema_id, shown_in)
        elif kind == "list":
            elements = list(iter_elements(raw, name))
            expiries = [e.expires_at_ms for e in elements if isinstance(e, Expiring)]
            read = [reader(e.value if isinstance(e, Expiring) else e) for e in elements]
            ids = [i for i, _ in read if i is not None]
            yield (partition, name, kind, _json(list(decode_key(key, name, grouped=grouped))), None,
                   _json([v for _, v in read]), min(expiries) if expiries else None,
                   max(ids) if ids else None, shown_in)
        elif kind == "map":
            group, user_key = split_map_key(key, name, grouped=grouped)
            stored, expires = decode_value_with_expiry(raw, name)
            schema_id, value = reader(stored)
            yield (partition, name, kind, _json(list(group)), _json(user_key), _json(value),
                   expires, schema_id, shown_in)
        elif cf == BY_EXPIRY_CF:
            return  # the same timers as timers/by_key, in expiry order
        elif cf == BY_KEY_CF:
            group = decode_key(key[:-EXPIRY_WIDTH], "timer", grouped=grouped)
            expiry = expiry_of(key[-EXPIRY_WIDTH:])
            yield (partition, "timers", "timer", _json(list(group)), None, _json(expiry), expiry,
                   None, None)
        else:
            raise StateDecodingError(f"column family {cf!r} of partition {partition} is not "
                                     f"state written by the Spark integration")


def _json(value: Any) -> str:
    return json.dumps(value, default=_bytes_as_base64, sort_keys=True)


def _bytes_as_base64(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.date):  # timestamp and date grouping keys
        return value.isoformat()
    raise TypeError(f"cannot show a {type(value).__name__} as JSON")


def register_state_reader(spark: Any) -> None:
    """Make spark.read.format("dstl-state") available in this session."""
    register_data_source(spark, DstlStateDataSource)


def read_state(spark: Any, checkpoint_location: str, batch_id: int | None = None,
               operator: str = "stateful", settings: Mapping[str, Any] | None = None) -> Any:
    """The state DataFrame, with the session's spark.dstl.* settings (plus `settings`)
    applied."""
    register_state_reader(spark)
    resolved = DstlSettings.from_session(spark, settings).settings
    reader = (spark.read.format(SOURCE_NAME).option("operatorName", operator)
              .option(SETTINGS_OPTION, json.dumps(dict(resolved))))
    if batch_id is not None:
        reader = reader.option("batchId", str(batch_id))
    return reader.load(checkpoint_location)
