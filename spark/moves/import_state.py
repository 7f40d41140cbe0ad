"""Bring the state along: a stopped PySpark transformWithState(InPandas) query's state becomes
the starting state of a checkpoint of this backend, and the query goes on from its next input.

    python -m pyspark_dstl import-state <spark-checkpoint> <checkpoint> --processor mod:Class
    pyspark_dstl.import_state(spark, spark_checkpoint, checkpoint, processor)

What it does, in order:

1. Reads Spark's logs (spark_checkpoint.py): the last batch N must be committed.
2. Reads Spark's operator metadata (`state-metadata` source): the transformWithState operator,
   its time mode and its state variables (kind, TTL or not).
3. Runs the user's processor's init() on the driver, as the compat path does, to learn each
   variable's schema, and checks that it declares every variable Spark kept, with its kind.
4. Reads the state through Spark's own `statestore` source at batch N (value, list and map
   state with their TTL expiries, and the registered timers) into one DataFrame of import
   records, and runs this backend's stateful stage on it as batch N: the processor of that
   stage runs the user's init() (so the variables are declared exactly as at run time) and
   writes every record with the encodings of the compat path, keeping Spark's TTL expiries and
   timer times. Its commit entry records N, the partition count of Spark's offset log
   (`spark.sql.shuffle.partitions`), the key columns, and the batch's clocks (processing time,
   watermark, next watermark) as a batch of this backend records them.
5. Copies Spark's `metadata`, `offsets/`, `commits/` and `sources/` to `<checkpoint>/engine`,
   so the query started there on this backend runs batch N+1 from the sources' positions.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.codec.values import encode_user_key, encode_value
from pyspark_dstl.spark.driver import query_lease as fencing
from pyspark_dstl.spark.driver.operator import (
    BatchBase,
    OperatorSpec,
    StageResult,
    StatefulOperator,
)
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.locations import default_engine_checkpoint, to_url
from pyspark_dstl.spark.moves.spark_checkpoint import (
    BatchLogs,
    ImportStateError,
    IncompleteSparkCheckpointError,
    NoTransformWithStateError,
    ProcessorMismatchError,
    SparkCheckpoint,
    SparkCheckpointError,
    TargetNotEmptyError,
    copy_engine_logs,
    engine_is_empty,
    local_path,
)
from pyspark_dstl.spark.processors.declarations import declaring_handle
from pyspark_dstl.spark.processors.processor import StatefulProcessor, StatefulProcessorHandle
from pyspark_dstl.spark.pyspark_api.pyspark_state import CompatHandle, SchemaBook, ttl_ms_of
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.time.clock import TimeSpec
from pyspark_dstl.spark.time.modes import time_mode_of
from pyspark_dstl.spark.time.timers import MIN_EXPIRY_MS

__all__ = [
    "ImportReport",
    "ImportStateError",
    "IncompleteSparkCheckpointError",
    "NoTransformWithStateError",
    "ProcessorMismatchError",
    "SparkCheckpointError",
    "TargetNotEmptyError",
    "import_state",
]

ENTRY = "import-state"
KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map"}
TARGET_FIX = "import into a local directory (it can be copied elsewhere as a whole)"
TICK_OFFSET = '{"tick":-1}'  # the tick source's offset before its first tick (ticks.py)

# columns of the import records, beside the key columns
VARIABLE = "__dstl_import_variable"  # index into the variables; TIMER_RECORD for a timer
EXPIRY = "__dstl_import_expiry"  # TTL expiry of a value or map entry (epoch ms), or null
TIMER = "__dstl_import_timer"  # a timer's expiry (epoch ms)
TIMER_RECORD = -1


def _value_column(index: int) -> str:
    return f"__dstl_import_value_{index}"


def _map_key_column(index: int) -> str:
    return f"__dstl_import_map_key_{index}"


@dataclass(frozen=True)
class SparkVariable:
    """One state variable as Spark's operator metadata lists it."""

    name: str
    kind: str  # "value", "list" or "map"
    ttl: bool


@dataclass(frozen=True)
class SparkOperator:
    """The transformWithState operator of the Spark checkpoint."""

    operator_id: int
    name: str
    num_partitions: int
    time_mode: str  # this backend's spelling
    variables: tuple[SparkVariable, ...]


@dataclass(frozen=True)
class ImportReport:
    """What import_state did."""

    batch_id: int
    partitions: int
    key_columns: tuple[str, ...]
    time_mode: str
    variables: tuple[str, ...]
    records: int  # import records written: values, lists, map entries and timers
    engine_checkpoint: str
    commit_path: str

    def describe(self) -> str:
        return (f"imported batch {self.batch_id}: {self.records} record(s) of "
                f"{len(self.variables)} state variable(s) ({', '.join(self.variables) or '-'}) "
                f"and timers, {self.partitions} state partitions, key "
                f"({', '.join(self.key_columns)}), time mode {self.time_mode}; Spark's logs "
                f"are at {self.engine_checkpoint}; the next batch is {self.batch_id + 1}")


# ---- the driver: reading Spark's metadata and state -------------------------------------------


def read_operator(spark: Any, checkpoint: SparkCheckpoint, batch_id: int) -> SparkOperator:
    """The one transformWithState operator of the checkpoint, from Spark's metadata reader."""
    import json

    if not (checkpoint.root / "state").is_dir():
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} has no state/ directory: its query has "
            f"no stateful operator, so there is no transformWithState state to import")
    try:
        rows = spark.read.format("state-metadata").load(str(checkpoint.root)).collect()
    except Exception as exc:  # Spark's AnalysisException and friends
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r}: Spark's state-metadata reader cannot "
            f"list its operators ({str(exc).splitlines()[0]:.200}); only transformWithState "
            f"queries of PySpark 4 can be imported") from exc
    found = [row for row in rows if "transformwithstate" in str(row["operatorName"]).lower()]
    if not found:
        names = sorted({str(row["operatorName"]) for row in rows}) or ["none"]
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} has no transformWithState operator "
            f"(operators: {', '.join(names)}); import-state reads transformWithState / "
            f"transformWithStateInPandas state only")
    others = sorted({(int(row["operatorId"]), str(row["operatorName"])) for row in rows
                     if row not in found})
    if others:
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} chains stateful operators with its "
            f"transformWithState ("
            + ", ".join(f"operator {number}: {name}" for number, name in others)
            + "); import-state imports transformWithState state only, and the state of the "
            "chained steps (open windows, seen keys) would be lost: let the query close what "
            "they hold first, or start the chained query on this backend from its input")
    if len({int(row["operatorId"]) for row in found}) > 1:
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} has several transformWithState "
            f"operators ({', '.join(str(r['operatorId']) for r in found)}); import-state "
            f"imports a query with one")
    row = found[0]
    if int(row["maxBatchId"]) < batch_id:
        raise IncompleteSparkCheckpointError(
            f"Spark checkpoint {str(checkpoint.root)!r}: the operator's state metadata ends at "
            f"batch {row['maxBatchId']} but batch {batch_id} is committed; restart the query on "
            f"PySpark until it commits again, stop it, then import")
    properties = json.loads(row["operatorProperties"] or "{}")
    variables = []
    for item in properties.get("stateVariables", []):
        name, kind = str(item["stateName"]), str(item["stateVariableType"])
        if name.startswith("$") or kind not in KINDS:
            continue  # timers and Spark's internal column families
        variables.append(SparkVariable(name, KINDS[kind], bool(item.get("ttlEnabled"))))
    return SparkOperator(int(row["operatorId"]), str(row["operatorName"]),
                         int(row["numPartitions"]),
                         _time_mode(properties.get("timeMode")), tuple(variables))


def _time_mode(spark_word: Any) -> str:
    """Spark records the time mode as NoTime, ProcessingTime or EventTime."""
    if spark_word is None or str(spark_word).lower() == "notime":
        return "none"
    return time_mode_of(spark_word)


@dataclass(frozen=True)
class Declared:
    """A state variable as the processor declared it: this backend's variable and the codecs
    of the compat path (values; map keys)."""

    kind: str
    native: Any  # ValueState, ListState or MapState
    values: Any  # RowCodec
    keys: Any = None  # RowCodec of a map's keys


class RecordingHandle(CompatHandle):
    """The compat path's handle, noting each declaration with its codecs."""

    def __init__(self, native: StatefulProcessorHandle, schemas: SchemaBook,
                 entry: str) -> None:
        super().__init__(native, schemas, entry)
        self.declared: dict[str, Declared] = {}

    def _note(self, kind: str, name: str, ttl: Any, values: Any, keys: Any = None) -> None:
        ttl_ms = ttl_ms_of(name, ttl, self._native.time_mode)
        self.declared[name] = Declared(kind, self._native.declare_state(kind, name, ttl_ms),
                                       values, keys)

    def getValueState(self, stateName: str, schema: Any,
                      ttlDurationMs: int | None = None) -> Any:
        state = super().getValueState(stateName, schema, ttlDurationMs)
        self._note("value", stateName, ttlDurationMs, self._codec(stateName, schema))
        return state

    def getListState(self, stateName: str, schema: Any,
                     ttlDurationMs: int | None = None) -> Any:
        state = super().getListState(stateName, schema, ttlDurationMs)
        self._note("list", stateName, ttlDurationMs, self._codec(stateName, schema))
        return state

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: int | None = None) -> Any:
        state = super().getMapState(stateName, userKeySchema, valueSchema, ttlDurationMs)
        self._note("map", stateName, ttlDurationMs,
                   self._codec(stateName, valueSchema, "map value"),
                   self._codec(stateName, userKeySchema, "map key"))
        return state


def declarations(processor: Any, time_mode: str) -> tuple[dict[str, str], dict[str, str]]:
    """(parsed schemas, kind by variable name) of the processor's init(), run on the driver on
    a copy with a declaring-only handle, as PySpark and the compat path do."""
    from pyspark import cloudpickle
    from pyspark.sql.types import _parse_datatype_string

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    book = SchemaBook(parse=_parse_datatype_string)
    handle = RecordingHandle(declaring_handle(time_mode), book, ENTRY)
    copy.init(handle)
    copy.close()
    return book.parsed, {name: d.kind for name, d in handle.declared.items()}


def check_processor(operator: SparkOperator, kinds: Mapping[str, str], processor: Any) -> None:
    for variable in operator.variables:
        declared = kinds.get(variable.name)
        if declared is None:
            raise ProcessorMismatchError(
                f"state variable {variable.name!r} ({variable.kind} state) of the Spark query "
                f"is not declared by {type(processor).__name__}.init() "
                f"(it declares: {', '.join(sorted(kinds)) or 'nothing'}): give the processor "
                f"class the query ran with")
        if declared != variable.kind:
            raise ProcessorMismatchError(
                f"state variable {variable.name!r} is {variable.kind} state in the Spark query "
                f"but {type(processor).__name__}.init() declares it as {declared} state: give "
                f"the processor class the query ran with")


def import_records(spark: Any, checkpoint: SparkCheckpoint, operator: SparkOperator,
                   batch_id: int) -> tuple[Any, tuple[str, ...]]:
    """(one DataFrame of import records, the key columns), read through Spark's `statestore`
    source at `batch_id`: one record per value, per list (its elements in order, each with its
    TTL expiry), per map entry, and per timer."""
    from pyspark.sql import functions as F

    def reader(**options: str) -> Any:
        read = (spark.read.format("statestore").option("batchId", batch_id)
                .option("operatorId", operator.operator_id))
        for key, value in options.items():
            read = read.option(key, value)
        return read.load(str(checkpoint.root))

    none = F.lit(None).cast("long")
    parts: list[Any] = []
    key_names: tuple[str, ...] | None = None

    def keys_of(frame: Any) -> list[Any]:
        nonlocal key_names
        names = tuple(frame.schema["key"].dataType.names)
        if key_names is None:
            key_names = names
        return [F.col("key").getField(name).alias(name) for name in names]

    def unwrap(column: Any, ttl: bool) -> tuple[Any, Any]:
        if ttl:
            return column.getField("value"), column.getField("ttlExpirationMs")
        return column, none

    for index, variable in enumerate(operator.variables):
        tag = F.lit(index).alias(VARIABLE)
        if variable.kind == "value":
            frame = reader(stateVarName=variable.name)
            value, expiry = unwrap(F.col("value"), variable.ttl)
            parts.append(frame.select(*keys_of(frame), tag, value.alias(_value_column(index)),
                                      expiry.alias(EXPIRY)))
        elif variable.kind == "list":  # one array per key keeps the elements' order
            frame = reader(stateVarName=variable.name, flattenCollectionTypes="false")
            parts.append(frame.select(*keys_of(frame), tag,
                                      F.col("list_value").alias(_value_column(index)),
                                      none.alias(EXPIRY)))
        else:
            frame = reader(stateVarName=variable.name)
            value, expiry = unwrap(F.col("user_map_value"), variable.ttl)
            parts.append(frame.select(*keys_of(frame), tag,
                                      F.col("user_map_key").alias(_map_key_column(index)),
                                      value.alias(_value_column(index)), expiry.alias(EXPIRY)))
    if operator.time_mode != "none":
        frame = reader(readRegisteredTimers="true")
        parts.append(frame.select(*keys_of(frame), F.lit(TIMER_RECORD).alias(VARIABLE),
                                  F.col("expiration_timestamp_ms").alias(TIMER)))
    if not parts or key_names is None:
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r}: the transformWithState operator keeps "
            f"no state variable and no timers; there is nothing to import")
    records = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
    return records, key_names


# ---- the executors: writing the records through the handle -------------------------------------


def plain(value: Any, data_type: Any) -> Any:
    """A value as Arrow hands it over (structs as dicts, maps as lists of pairs) in the form the
    compat path's codecs take (maps as dicts)."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(data_type, T.StructType):
        return {f.name: plain(value.get(f.name), f.dataType) for f in data_type.fields}
    if isinstance(data_type, T.ArrayType):
        return [plain(item, data_type.elementType) for item in value]
    if isinstance(data_type, T.MapType):
        pairs = value.items() if isinstance(value, Mapping) else value
        return {plain(k, data_type.keyType): plain(v, data_type.valueType) for k, v in pairs}
    return value


def _stored_type(variable: SparkVariable, column_type: Any) -> Any:
    """The Spark type of one stored value: a list's column holds an array of its elements,
    each wrapped with its TTL expiry when the variable has a TTL."""
    if variable.kind != "list":
        return column_type
    element = column_type.elementType
    return element["value"].dataType if variable.ttl else element


@dataclass(frozen=True)
class Target:
    """Where the records of one variable go, and the Spark types they arrive in."""

    variable: SparkVariable
    value_type: Any
    key_type: Any = None


class StateImporter(StatefulProcessor):
    """The stateful stage's processor for an import: per key, writes its import records.

    It runs the user's init() first, through the compat path's handle, so every variable is
    declared (kind, TTL, schema) exactly as when the query runs. A state variable computes a
    new expiry from the batch's clock when written; an import keeps the expiry Spark recorded,
    so the records are written as the bytes the compat path's variables write (their codecs,
    `encode_value` with the expiry), under the variable's column family and the current key.
    Timers are registered through the handle with their original times."""

    def __init__(self, processor: Any, schemas: Mapping[str, str],
                 targets: Sequence[Target]) -> None:
        self.processor = processor
        self.schemas = dict(schemas)
        self.targets = tuple(targets)
        self.display_name = f"import-state({type(processor).__name__})"

    def init(self, handle: StatefulProcessorHandle) -> None:
        recording = RecordingHandle(handle, SchemaBook(self.schemas), ENTRY)
        self.processor.init(recording)
        self._handle = handle
        self._declared = [recording.declared[t.variable.name] for t in self.targets]

    def rows_by_key(self, batch: KeyedBatch, initial: bool = False) -> Any:
        table, offsets = batch.table, batch.offsets

        def records(index: int) -> list[dict[str, Any]]:
            start = int(offsets[index])
            rows: list[dict[str, Any]] = table.slice(start, int(offsets[index + 1]) - start
                                                     ).to_pylist()
            return rows

        return records

    def handle_input_rows(self, key: tuple[Any, ...], rows: Any) -> Any:
        store = self._handle._store
        current = self._handle._context.require_current("import-state")
        for record in next(rows):
            index = int(record[VARIABLE])
            if index == TIMER_RECORD:
                self._handle.register_timer(int(record[TIMER]), allow_due=True)
                continue
            target, declared = self.targets[index], self._declared[index]
            name = target.variable.name
            value = record[_value_column(index)]
            if target.variable.kind == "value":
                store.put(current, self._encode(declared, target, value, record[EXPIRY]),
                          declared.native.cf)
            elif target.variable.kind == "list":
                elements = value or []
                if target.variable.ttl:
                    pairs = [(e["value"], e["ttlExpirationMs"]) for e in elements]
                else:
                    pairs = [(e, None) for e in elements]
                if pairs:
                    store.put(current, b"".join(self._encode(declared, target, v, expiry)
                                                for v, expiry in pairs), declared.native.cf)
            else:
                user_key = declared.keys.encode(plain(record[_map_key_column(index)],
                                                      target.key_type))
                store.put(current + encode_user_key(user_key, name),
                          self._encode(declared, target, value, record[EXPIRY]),
                          declared.native.cf)
        return iter(())

    @staticmethod
    def _encode(declared: Declared, target: Target, value: Any, expiry: Any) -> bytes:
        return encode_value(declared.values.encode(plain(value, target.value_type)),
                            None if expiry is None else int(expiry), target.variable.name)

    def close(self) -> None:
        self.processor.close()


class ImportOperator(StatefulOperator):
    """The stateful stage run once, as the Spark query's last batch, over import records.

    Its clock is the earliest time there is, so no imported timer fires and nothing expires
    while the records are written; its commit entry records the clocks of Spark's batch."""

    def __init__(self, spec: OperatorSpec, conf: DstlSettings, logs: BatchLogs,
                 spark_time_mode: str, processor_name: str) -> None:
        super().__init__(spec, conf)
        self.logs = logs
        self.spark_time_mode = spark_time_mode
        self.processor_name = processor_name

    def _batch_time(self, base: BatchBase, batch_id: int) -> int:
        return MIN_EXPIRY_MS

    def _time_extra(self, result: StageResult) -> dict[str, Any]:
        logs = self.logs
        timers = [int(r.next_timer_ms) for r in result.reports.values()
                  if r.next_timer_ms is not None]
        record: dict[str, Any] = {"mode": self.spark_time_mode, "now_ms": logs.timestamp_ms,
                                  "next_timer_ms": min(timers, default=None),
                                  "late_rows": 0, "timers_fired": 0}
        if (self.spark_time_mode == "event_time" or logs.watermark_ms > 0
                or logs.next_watermark_ms > 0):
            record.update(watermark_ms=logs.watermark_ms,
                          late_threshold_ms=logs.previous_watermark_ms,
                          max_event_time_ms=None, next_watermark_ms=logs.next_watermark_ms)
        return {"time": record,
                "imported": {"from": "spark", "batch_id": logs.batch_id,
                             "processor": self.processor_name}}


# ---- the whole import ------------------------------------------------------------------------


def resolve_processor(processor: Any) -> Any:
    """An instance, or "module:Class" (instantiated without arguments)."""
    from pyspark.sql.streaming import StatefulProcessor as PySparkProcessor

    if isinstance(processor, str):
        module_name, sep, class_name = processor.partition(":")
        if not sep or not module_name or not class_name:
            raise ConfigError(f"processor: expected module:Class, got {processor!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"processor {processor!r}: module {module_name!r} cannot be "
                              f"imported: {exc}") from exc
        cls = getattr(module, class_name, None)
        if cls is None:
            raise ConfigError(f"processor {processor!r}: module {module_name!r} has no "
                              f"{class_name!r}")
        processor = cls()
    if not isinstance(processor, PySparkProcessor):
        raise ConfigError(f"processor: {type(processor).__name__} is not a subclass of "
                          f"pyspark.sql.streaming.StatefulProcessor (import-state brings the "
                          f"state of PySpark's transformWithState queries)")
    return processor


def check_target(checkpoint_url: str, engine: str) -> None:
    root = local_path(checkpoint_url, "checkpoint", TARGET_FIX)
    for name in ("commits", "state"):
        directory = root / name
        if directory.is_dir() and any(directory.iterdir()):
            raise TargetNotEmptyError(
                f"checkpoint {checkpoint_url!r} already holds state ({name}/ is not empty): "
                f"import into a new, empty checkpoint location")
    if not engine_is_empty(local_path(engine, "engine checkpoint", TARGET_FIX)):
        raise TargetNotEmptyError(
            f"engine checkpoint {engine!r} is not empty: import into a new checkpoint "
            f"location whose engine directory does not exist yet")


def import_state(spark: Any, spark_checkpoint: str, checkpoint: str, processor: Any, *,
                 name: str | None = None, conf: Mapping[str, Any] | None = None,
                 engine_checkpoint: str | None = None) -> ImportReport:
    """Make the state of the stopped transformWithState query at `spark_checkpoint` (at its
    last committed batch N) the starting state of `checkpoint`, and copy Spark's logs to the
    engine checkpoint (`<checkpoint>/engine` by default), so that the same query started on
    this backend there goes on with batch N+1. `processor`: the query's PySpark
    StatefulProcessor, an instance or "module:Class". `name`, `conf`: as process(...)'s."""
    from pyspark.sql.types import LongType, StructField, StructType

    processor = resolve_processor(processor)
    source = SparkCheckpoint.open(spark_checkpoint)
    url = to_url(checkpoint)
    local_path(url, "checkpoint", TARGET_FIX)
    engine = engine_checkpoint or default_engine_checkpoint(url)
    check_target(url, engine)
    logs = source.last_committed()
    operator = read_operator(spark, source, logs.batch_id)
    schemas, kinds = declarations(processor, operator.time_mode)
    check_processor(operator, kinds, processor)
    partitions = logs.shuffle_partitions or operator.num_partitions
    records, key_columns = import_records(spark, source, operator, logs.batch_id)
    fields = {f.name: f.dataType for f in records.schema.fields}
    targets = [Target(v, _stored_type(v, fields[_value_column(i)]),
                      fields.get(_map_key_column(i))) for i, v in enumerate(operator.variables)]
    overrides: dict[str, Any] = dict(conf or {})
    overrides[QUERY_PREFIX + "checkpointLocation"] = url
    overrides[QUERY_PREFIX + "partitions"] = partitions
    overrides[QUERY_PREFIX + "outputMode"] = "collect"
    if name is not None:
        overrides[QUERY_PREFIX + "operatorName"] = name
    settings = DstlSettings.from_session(spark, overrides)
    mode = "none" if operator.time_mode == "none" else "processing_time"
    spec = OperatorSpec(processor=StateImporter(processor, schemas, targets),
                        key_columns=key_columns,
                        output_schema=StructType([StructField("imported", LongType())]),
                        checkpoint=url, partitions=partitions,
                        name=settings.query.operator_name, time=TimeSpec(mode))
    importer = ImportOperator(spec, settings, logs, operator.time_mode,
                              type(processor).__name__)
    result = importer.execute(records, logs.batch_id)
    try:
        path = importer.commit(result)
    finally:
        importer.release(result)
        fencing.hold(importer).release("import-state finished")
    ticks = [TICK_OFFSET] if operator.time_mode != "none" else []
    copy_engine_logs(source, local_path(engine, "engine checkpoint", TARGET_FIX), ticks)
    return ImportReport(batch_id=logs.batch_id, partitions=partitions, key_columns=key_columns,
                        time_mode=operator.time_mode,
                        variables=tuple(v.name for v in operator.variables),
                        records=sum(r.input_rows for r in result.reports.values()),
                        engine_checkpoint=engine, commit_path=path)
