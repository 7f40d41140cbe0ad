"""The "dstl-export" data source: a location's state at a committed batch, as the records an
export writes through Spark's own operator (export_state.py).

One record per value, per list element, per map entry and per timer, with the grouping key in
typed columns (the query's key columns and types, so Spark routes every key to the partition
its own query would) and the value as the msgpack of its fields in the current state schema's
stored form (codec/typed_values.py), which the export's processor decodes with the variable's
schema (export_writer.py). Values and entries whose TTL expired by the batch's processing time
are left out: no batch after it can see them.

Each TTL'd record carries the processing time Spark must write it at to keep its expiry:
Spark computes a TTL expiry as the batch's processing time plus the variable's TTL, so a value
that expires at E under a TTL of D is written in a batch whose processing time is E - D (the
processing time of the batch that last wrote it here). Two cases cannot keep E, both only
after a TTL changed between runs, and the export reports how many records they touch: a time
past the last batch's is held to the last batch's (the value expires earlier in Spark), and a
list element is never written before the element ahead of it (Spark appends in batch order,
so the element expires later in Spark).

A chained step's store is read in the same partitions (its `step`): an aggregation's or a
deduplication's entries raw, for the first stage; a chained transformWithState's records as the
first step's, each packed into one record of kind CHAINED_RECORD, staged by its write time.

Batch read: every record (the export plans its batches from their times). Stream read: one
micro-batch per stage of the export (offset `{"stage": n}`), the records of that stage only;
`stages` maps each write time to its stage (0 for records without a TTL, which Spark writes in
its first batch whatever its processing time).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.naming import split_store_id
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.codec.evolution import VersionedRowCodec, untag
from pyspark_dstl.spark.codec.schema_history import SchemaHistory, value_schemas, value_struct
from pyspark_dstl.spark.codec.values import (
    Expiring,
    decode_key,
    decode_value_with_expiry,
    encode_user_key,
    iter_elements,
    split_map_key,
)
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects
from pyspark_dstl.spark.time.timers import BY_EXPIRY_CF, BY_KEY_CF, EXPIRY_WIDTH, expiry_of

SOURCE_NAME = "dstl-export"
VARIABLE = "__dstl_export_variable"  # index into the variables; TIMER_RECORD for a timer
POSITION = "__dstl_export_position"  # a list element's place in its list
VALUE = "__dstl_export_value"  # msgpack of the value's fields (current schema, stored form)
MAP_KEY = "__dstl_export_map_key"  # msgpack of a map entry's user key (stored form)
EXPIRY = "__dstl_export_expiry"  # the TTL expiry (epoch ms), null without a TTL
TIMER = "__dstl_export_timer"  # a timer's expiry (epoch ms)
WRITE_TIME = "__dstl_export_time"  # the processing time Spark writes a TTL'd record at
RECORD_COLUMNS = (f"{VARIABLE} INT, {POSITION} INT, {VALUE} BINARY, {MAP_KEY} BINARY, "
                  f"{EXPIRY} LONG, {TIMER} LONG, {WRITE_TIME} LONG")
RECORD_NAMES = (VARIABLE, POSITION, VALUE, MAP_KEY, EXPIRY, TIMER, WRITE_TIME)
TIMER_RECORD = -1
CHAINED_RECORD = -2  # an entry of a chained step: POSITION its step, VALUE, MAP_KEY raw
NO_STAGE = -1


def record_schema(key_columns: list[tuple[str, str]]) -> str:
    """The source's DDL: the key columns with their Spark types, then the record columns."""
    keys = ", ".join(f"`{name}` {data_type}" for name, data_type in key_columns)
    return f"{keys}, {RECORD_COLUMNS}"


class ExportPartition(InputPartition):
    def __init__(self, partition: int, info: str, step: int = 0) -> None:
        super().__init__(partition)
        self.partition = partition
        self.info = info  # the store's StoreCommit, JSON
        self.step = step  # 0: the first step's store; n: the store of chained step n


class ExportRecordsSource(DataSource):
    """Options (all set by export_state.py): path (the location), plan (JSON: the batch's
    stores, the variables with their TTLs, the schema history, the processing time of the
    batch, the key columns, the settings of the backend), stages (stream read: JSON)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        freeze_imported_objects()  # planned in a reused Python worker too
        plan = json.loads(self.options["plan"])
        return record_schema([(k, t) for k, t in plan["key_columns"]])

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return ExportReader(dict(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        freeze_imported_objects()  # planned in a reused Python worker too
        return ExportStreamReader(dict(self.options))


class ExportReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = str(options["path"])
        self.plan = json.loads(options["plan"])
        stages = options.get("stages")
        self.stages = None if stages is None else {int(t): int(s) for t, s in
                                                   json.loads(stages).items()}

    def partitions(self) -> list[InputPartition]:
        stores = [(0, info) for _, info in sorted(self.plan["stores"].items(),
                                                   key=lambda i: int(i[0]))]
        for chained in self.plan.get("chained") or []:
            stores += [(int(chained["position"]), info) for _, info in
                       sorted(chained["stores"].items(), key=lambda i: int(i[0]))]
        return [ExportPartition(number, json.dumps(info), step)
                for number, (step, info) in enumerate(stores)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ExportPartition)
        freeze_imported_objects()
        yield from records_of_partition(self.url, self.plan, partition, self.stages, None)


class ExportStreamReader(DataSourceStreamReader):
    """Stage n is micro-batch n; the export runs stage 0 as a new query and writes the offset
    log entries of the later stages itself (export_state.py)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.batch = ExportReader(options)

    def initialOffset(self) -> dict[str, int]:
        return {"stage": NO_STAGE}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, int]:
        """Stage 0 (PySpark 4.0 asks without arguments, later releases with the start and a
        read limit; the answer is the same)."""
        return {"stage": 0}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        stage = int(end["stage"])
        if int(start["stage"]) != stage - 1:
            raise ValueError(f"dstl-export: stages {start} to {end}: one stage per batch")
        return [StagePartition(p.partition, p.info, stage, p.step)  # type: ignore[attr-defined]
                for p in self.batch.partitions()]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, StagePartition)
        freeze_imported_objects()
        yield from records_of_partition(self.batch.url, self.batch.plan, partition,
                                        self.batch.stages, partition.stage)

    def commit(self, end: dict[str, int]) -> None:
        pass


class StagePartition(ExportPartition):
    def __init__(self, partition: int, info: str, stage: int, step: int = 0) -> None:
        super().__init__(partition, info, step)
        self.stage = stage


def records_of_partition(url: str, plan: Mapping[str, Any], partition: ExportPartition,
                         stages: Mapping[int, int] | None, stage: int | None
                         ) -> Iterator[tuple[Any, ...]]:
    if partition.step == 0:
        yield from records_of_store(url, plan, partition.info, stages, stage)
        return
    chained = next(c for c in plan.get("chained") or [] if int(c["position"]) == partition.step)
    if chained.get("transform") is not None:  # its records by write time, as the first's
        yield from transform_records(url, plan, chained, partition.info, stages, stage)
    elif stage is None or stage == 0:  # a chained step's entries: the first stage
        yield from chained_records(url, plan, partition.info, partition.step)


def transform_records(url: str, plan: Mapping[str, Any], chained: Mapping[str, Any],
                      info_json: str, stages: Mapping[int, int] | None, stage: int | None
                      ) -> Iterator[tuple[Any, ...]]:
    """The records of a chained transformWithState's store, read as the first step's (its
    variables, TTLs and schema history), each packed into a record of kind CHAINED_RECORD:
    MAP_KEY its grouping key (`pack_key`), VALUE the msgpack array (variable, position,
    value, map key, timer) its stager unpacks; WRITE_TIME stays (the stages), EXPIRY is the
    write time that keeps the expiry (the expiry less the variable's TTL: the export counts
    the records whose write time had to differ), TIMER is set only for a processing-time
    timer (the export keeps those from firing)."""
    import msgpack

    from pyspark_dstl.spark.codec.values import pack_key

    transform = chained["transform"]
    own = {**plan, "variables": transform["variables"], "history": transform["history"]}
    width = len(plan["key_columns"])
    keys = len(transform["key_columns"])
    step = int(chained["position"])
    processing = transform["time_mode"] == "processing_time"
    ttls = [v["ttl_ms"] for v in transform["variables"]]
    for row in records_of_store(url, own, info_json, stages, stage):
        group, (variable, position, value, map_key, expiry, timer, at) = (
            row[:keys], row[keys:])
        packed = msgpack.packb([variable, position, value, map_key, timer], use_bin_type=True)
        kept = (None if expiry is None or variable < 0 or ttls[variable] is None
                else int(expiry) - int(ttls[variable]))
        yield (*([None] * width), CHAINED_RECORD, step, packed, pack_key(group), kept,
               timer if processing else None, at)


def chained_records(url: str, plan: Mapping[str, Any], info_json: str, step: int
                    ) -> Iterator[tuple[Any, ...]]:
    """Every stored entry of a chained step's store (its timers left out: Spark's operators
    of those steps evict by the watermark), as (key bytes, value bytes) in a record of kind
    CHAINED_RECORD; the export's writer decodes them (chain_export.py)."""
    width = len(plan["key_columns"])
    rows: list[tuple[Any, ...]] = []
    with _stored(url, plan, info_json) as store:
        for cf in store.column_families():
            if not cf.startswith("value/"):
                continue
            for key, raw in store.iterator(cf):
                rows.append((*([None] * width), CHAINED_RECORD, step, bytes(raw), bytes(key),
                             None, None, None))
    yield from rows


@contextlib.contextmanager
def _stored(url: str, plan: Mapping[str, Any], info_json: str) -> Iterator[Any]:
    """The store of one state partition at the exported batch, read-only, restored into a
    scratch directory that goes with it."""
    info = StoreCommit.from_dict(json.loads(info_json))
    operator, number = split_store_id(info.store_id)
    scratch = tempfile.mkdtemp(prefix="dstl-export-")
    settings = {**plan["settings"], "spark.dstl.stateStore.localDir": scratch}
    try:
        with StateBackend(BackendSettings.from_mapping(settings)) as backend:
            store = backend.provider(url, operator, number).get_store(info.version, info)
            try:
                yield store
            finally:
                store.abort()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_time(expiry: int | None, ttl_ms: int | None, now_ms: int
               ) -> tuple[bool, int | None]:
    """(whether a value with this expiry is alive after the batch at `now_ms`, the processing
    time Spark writes it at: its expiry less the TTL, held to `now_ms`; None without a TTL)."""
    if expiry is None or ttl_ms is None:
        return True, None
    if expiry <= now_ms:
        return False, None
    return True, min(int(expiry) - int(ttl_ms), now_ms)


def stage_of(at: int | None, is_timer: bool, stages: Mapping[int, int]) -> int:
    """The stage of a record: by its write time; timers at the timers' stage (key -1)."""
    if is_timer:
        return stages.get(TIMER_RECORD, 0)
    return 0 if at is None else stages[at]


def records_of_store(url: str, plan: Mapping[str, Any], info_json: str,
                     stages: Mapping[int, int] | None, stage: int | None
                     ) -> Iterator[tuple[Any, ...]]:
    """The records of one state partition (of one stage when `stage` is given)."""
    import msgpack

    now_ms = int(plan["now_ms"])
    variables = [(str(v["name"]), str(v["kind"]), v["ttl_ms"]) for v in plan["variables"]]
    index = {name: i for i, (name, _, _) in enumerate(variables)}
    history = (None if plan.get("history") is None
               else SchemaHistory.from_dict(plan["history"]))
    codecs = {name: _fields_reader(history, name) for name, _, _ in variables}
    grouped = bool(plan.get("grouped", True))

    def fields(name: str, stored: Any) -> bytes:
        return msgpack.packb(codecs[name](stored), use_bin_type=True)

    def timed(name: str, expiry: int | None) -> tuple[bool, int | None]:
        return write_time(expiry, variables[index[name]][2], now_ms)

    def keep(at: int | None, is_timer: bool) -> bool:
        return stage is None or stages is None or stage_of(at, is_timer, stages) == stage

    rows: list[tuple[Any, ...]] = []
    with _stored(url, plan, info_json) as store:
        for cf in store.column_families():
            kind, _, name = cf.partition("/")
            for key, raw in store.iterator(cf):
                for row, at, is_timer in _records(kind, cf, name, key, raw, grouped, index,
                                                  fields, timed):
                    if keep(at, is_timer):
                        rows.append(row)
    yield from rows


def _records(kind: str, cf: str, name: str, key: bytes, raw: bytes, grouped: bool,
             index: Mapping[str, int], fields: Any, timed: Any
             ) -> Iterator[tuple[tuple[Any, ...], int | None, bool]]:
    """(row, write time, is a timer) of one stored entry."""
    if kind in ("value", "list", "map") and name not in index:
        return  # a variable the processor no longer declares: PySpark would not read it
    if kind == "value":
        stored, expiry = decode_value_with_expiry(raw, name)
        alive, at = timed(name, expiry)
        if alive:
            yield (*decode_key(key, name, grouped=grouped), index[name], None,
                   fields(name, stored), None, expiry, None, at), at, False
    elif kind == "list":
        floor: int | None = None  # elements are appended in stage order: keep the list's
        for position, element in enumerate(iter_elements(raw, name)):
            expiry = element.expires_at_ms if isinstance(element, Expiring) else None
            stored = element.value if isinstance(element, Expiring) else element
            alive, at = timed(name, expiry)
            if alive:
                if at is not None:
                    at = at if floor is None else max(at, floor)
                    floor = at
                yield (*decode_key(key, name, grouped=grouped), index[name], position,
                       fields(name, stored), None, expiry, None, at), at, False
    elif kind == "map":
        group, user_key = split_map_key(key, name, grouped=grouped)
        stored, expiry = decode_value_with_expiry(raw, name)
        alive, at = timed(name, expiry)
        if alive:
            yield (*group, index[name], None, fields(name, stored),
                   encode_user_key(user_key, name), expiry, None, at), at, False
    elif cf == BY_KEY_CF:
        group = decode_key(key[:-EXPIRY_WIDTH], "timer", grouped=grouped)
        yield (*group, TIMER_RECORD, None, None, None, None,
               expiry_of(key[-EXPIRY_WIDTH:]), None), None, True
    elif cf != BY_EXPIRY_CF:
        return


def _fields_reader(history: SchemaHistory | None, name: str) -> Any:
    """stored value -> its fields in the current schema's stored form."""
    if history is None or name not in history.records[history.current].declarations.variables:
        return lambda stored: untag(stored, name)[1]
    declared = history.records[history.current].declarations.variables[name]
    codec = VersionedRowCodec(value_struct(declared), name, history.current,
                              value_schemas(history, name))
    return lambda stored: codec.current_fields(stored)[1]
