"""A checkpoint location of this backend, seen as Spark's state data sources see a Spark
checkpoint: committed batches, stateful operators by id, and each operator's state variables,
schemas, partitions and time at a batch.

Spark numbers the stateful operators of a query from 0 in plan order; here the commit entry
lists a batch's operators in that order (`operator_names`, the one place that numbers them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.commit_log import CommitLog, is_entry_name
from pyspark_dstl.backend.lineage.schema_records import SchemaHistory, StateDeclaration, history_at
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_groups import key_groups_in
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.spark.locations import to_url
from pyspark_dstl.spark.time.modes import EVENT_TIME, NO_TIME_MODE, PROCESSING_TIME

ENTRY_EXTRA, OUTPUT_MODE_EXTRA = "pyspark_entry", "pyspark_output_mode"
"""Commit entry extra: the PySpark call that started the operator and its outputMode, written
by driver/operator.py."""
COMMITS_DIR = "commits"
HADOOP_S3_SCHEMES = ("s3a://", "s3n://")
RETENTION_KEY = "spark.dstl.stateStore.minBatchesToRetain"
OPERATOR_NAMES = {"transformWithStateInPandas": "transformWithStateInPandasExec",
                  "transformWithState": "transformWithStateInPySparkExec"}
"""Spark's name of the operator each of PySpark's entry points plans."""
DEFAULT_ENTRY = "transformWithStateInPandas"  # entries written before the call was recorded
TIME_MODE_WORDS = {NO_TIME_MODE: "NoTime", PROCESSING_TIME: "ProcessingTime",
                   EVENT_TIME: "EventTime"}
"""How Spark's operator properties spell each time mode (PySpark's "None" is "NoTime")."""
TIMER_VARIABLES = {PROCESSING_TIME: "$procTimers_keyToTimestamp",
                   EVENT_TIME: "$eventTimers_keyToTimestamp"}
"""The name Spark lists the timers under among the state variables, per time mode."""


def state_url(path: str) -> str:
    """The URL of a checkpoint location as this backend's storage opens it: Hadoop's `s3a://`
    and `s3n://` name the same objects as `s3://` (the switch keeps a query's state there)."""
    url = to_url(path)
    for scheme in HADOOP_S3_SCHEMES:
        if url.startswith(scheme):
            return "s3://" + url[len(scheme):]
    return url


def operator_names(entry: CommitEntry) -> list[str]:
    """The batch's stateful operators by Spark's operator id: id i is the i-th. The stage
    records its operators in plan order, so the entry's order is Spark's numbering (one
    stateful step: operator 0)."""
    return list(entry.operators)


@dataclass(frozen=True)
class OperatorAtBatch:
    """One stateful operator of one committed batch, with what Spark's readers show of it."""

    batch_id: int
    operator_id: int
    name: str
    entry: CommitEntry
    history: SchemaHistory | None  # None: a processor of this library's own API

    @property
    def num_partitions(self) -> int:
        return self.entry.operators[self.name].num_partitions

    @property
    def stores(self) -> Mapping[int, StoreCommit]:
        return self.entry.operators[self.name].stores

    @property
    def grouped(self) -> bool:
        """Whether stored keys start with their key group (entries since key groups)."""
        return key_groups_in(self.entry.extra) is not None

    @property
    def time_mode(self) -> str:
        return str((self.entry.extra.get("time") or {}).get("mode", NO_TIME_MODE))

    @property
    def now_ms(self) -> int | None:
        """The batch's processing time (what TTL expiry is measured against)."""
        value = (self.entry.extra.get("time") or {}).get("now_ms")
        return None if value is None else int(value)

    @property
    def spark_operator_name(self) -> str:
        return OPERATOR_NAMES.get(str(self.entry.extra.get(ENTRY_EXTRA, DEFAULT_ENTRY)),
                                  OPERATOR_NAMES[DEFAULT_ENTRY])

    @property
    def output_mode(self) -> str:
        return str(self.entry.extra.get(OUTPUT_MODE_EXTRA, "Update")).capitalize()

    @property
    def variables(self) -> Mapping[str, StateDeclaration]:
        """The state variables the processor declared at this batch."""
        if self.history is None:
            return {}
        return self.history.records[self.history.current].declarations.variables

    @property
    def timer_variable(self) -> str | None:
        """The name Spark gives the timers of this operator (None without a time mode)."""
        return TIMER_VARIABLES.get(self.time_mode)

    def grouping_key(self) -> Any:
        """The grouping columns as a StructType (names and Spark types)."""
        from pyspark.sql.types import StructType

        assert self.history is not None
        record = self.history.records[self.history.current]
        return StructType.fromJson(json.loads(record.declarations.grouping_key))

    def key_types(self) -> list[str]:
        return [field.dataType.simpleString() for field in self.grouping_key().fields]


class StateLocation:
    """A checkpoint location opened for reading (one storage client; close it)."""

    def __init__(self, path: str, settings: Mapping[str, str] | None = None) -> None:
        self.url = state_url(path)
        self.location = to_url(path)  # how Spark's messages show the location
        self.settings = dict(settings or {})
        options = BackendSettings.from_mapping(self.settings)
        self.storage = ChangelogService(self.url, options.changelog)
        self.log = CommitLog(self.storage)
        self._batches: list[int] | None = None
        self._entries: dict[int, CommitEntry] = {}
        self._histories: dict[tuple[str, int], SchemaHistory | None] = {}

    def close(self) -> None:
        self.storage.close()

    def __enter__(self) -> StateLocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- committed batches --------------------------------------------------------------------

    def batch_ids(self, refresh: bool = False) -> list[int]:
        if self._batches is None or refresh:
            self._batches = self.log.batch_ids()
        return self._batches

    def newest_batch(self) -> int | None:
        batches = self.batch_ids()
        return batches[-1] if batches else None

    def missing_batch(self, batch_id: int) -> str | None:
        """None when `batch_id` is committed and retained; else why it cannot be read."""
        batches = self.batch_ids()
        if batch_id in set(batches):
            return None
        if not batches:
            return f"{self.location} holds no committed batch yet"
        if batch_id > batches[-1]:
            return (f"batch {batch_id} is newer than the newest committed batch "
                    f"{batches[-1]}")
        retain = BackendSettings.from_mapping(self.settings).min_batches_to_retain
        return (f"batch {batch_id} is no longer retained: cleanup keeps the newest "
                f"{RETENTION_KEY} (={retain}) committed batches, {batches[0]}..{batches[-1]} "
                f"now; raise {RETENTION_KEY} for the query to keep more")

    def entry(self, batch_id: int) -> CommitEntry:
        found = self._entries.get(batch_id)
        if found is None:
            found = self.log.read(batch_id)
            self._entries[batch_id] = found
        return found

    # --- operators ----------------------------------------------------------------------------

    def operator(self, batch_id: int, operator_id: int) -> OperatorAtBatch | None:
        """Operator `operator_id` at a committed batch; None when the batch has no such one."""
        entry = self.entry(batch_id)
        names = operator_names(entry)
        if not 0 <= operator_id < len(names):
            return None
        name = names[operator_id]
        return OperatorAtBatch(batch_id, operator_id, name, entry, self.history(name, entry))

    def history(self, operator: str, entry: CommitEntry) -> SchemaHistory | None:
        key = (operator, entry.batch_id)
        if key not in self._histories:
            self._histories[key] = history_at(self.storage, operator, entry)
        return self._histories[key]


def holds_backend_checkpoint(path: str, settings: Mapping[str, str] | None = None) -> bool:
    """Whether `path` is a checkpoint location of this backend: its commit log under
    `commits/` holds entries named as this backend names them (`<batch>.<generation>`; Spark's
    own commit log names its files `<batch>`). One listing; nothing is read."""
    try:
        url = state_url(path)
    except Exception:  # not a location this backend can open: Spark's source decides
        return False
    options = BackendSettings.from_mapping(dict(settings or {}))
    try:
        with ChangelogService(url, options.changelog) as storage:
            infos = storage.loop.run(storage.alist(COMMITS_DIR + "/"))
    except Exception:  # unreachable, unknown scheme, no such folder: not ours to answer
        return False
    return any(is_entry_name(info.path[len(COMMITS_DIR) + 1:]) for info in infos)
