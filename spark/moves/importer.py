"""The import machinery: a stopped PySpark transformWithState(InPandas) query's state, read
through Spark's own readers, committed here as the starting state of a location of this
backend. The commands that use it: import_state.py (into a new location, or in place) and
in_place.py (the in-place move, also at a query's start on the switch).

What an import does, in order:

1. `prepare_import`: reads Spark's logs (spark_checkpoint.py: the last batch N must be
   committed) and Spark's operator metadata (`state-metadata` source: the transformWithState
   operator, its time mode and its state variables: kind, TTL or not); runs the user's
   processor's init() on the driver, as the compat path does, to learn each variable's schema,
   and checks that it declares every variable Spark kept, with its kind; and plans the read of
   the state through Spark's own `statestore` source at batch N (value, list and map state
   with their TTL expiries, and the registered timers) as one DataFrame of import records.
   A query that chains stateful steps after its transformWithState brings their state too
   when the chained query is given (chain_import.py): each chained operator's state is read
   and planned the same way, in the encoding of the query's step at that place.
2. `commit_import`: runs this backend's stateful stage on the records as batch N: the stage's
   processor runs the user's init() (so the variables are declared exactly as at run time)
   and writes every record with the encodings of the compat path, keeping Spark's TTL expiries
   and timer times. Its commit entry records N, the partition count of Spark's offset log
   (`spark.sql.shuffle.partitions`), the key columns, the batch's clocks (processing time,
   watermark, next watermark) as a batch of this backend records them, and where the state
   came from (`extra["imported"]`). Each chained operator's stage runs after it on its own
   records, and the same commit entry records them as the chain's operators.
3. The caller copies Spark's `metadata`, `offsets/`, `commits/` and `sources/` to the engine
   checkpoint (spark_checkpoint.copy_engine_logs), so the query started there on this backend
   runs batch N+1 from the sources' positions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark_dstl.spark.chain.links import TRANSFORM, ChainLink
from pyspark_dstl.spark.codec.values import encode_user_key, encode_value
from pyspark_dstl.spark.driver import query_lease as fencing
from pyspark_dstl.spark.driver.chained import ChainWatermarks
from pyspark_dstl.spark.driver.operator import (
    BatchBase,
    OperatorSpec,
    StageResult,
    StatefulOperator,
)
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.moves.chain_import import (
    ChainedImport,
    SparkStep,
    in_query_order,
    plan_chain_import,
)
from pyspark_dstl.spark.moves.spark_checkpoint import (
    BatchLogs,
    ChainImportError,
    IncompleteSparkCheckpointError,
    NoTransformWithStateError,
    ProcessorMismatchError,
    SparkCheckpoint,
)
from pyspark_dstl.spark.processors.declarations import declaring_handle
from pyspark_dstl.spark.processors.processor import StatefulProcessor, StatefulProcessorHandle
from pyspark_dstl.spark.pyspark_api.pyspark_state import CompatHandle, SchemaBook, ttl_ms_of
from pyspark_dstl.spark.query_settings import QUERY_PREFIX, DstlSettings
from pyspark_dstl.spark.readers.routing import sparks_own_state_reads
from pyspark_dstl.spark.time.clock import TimeSpec
from pyspark_dstl.spark.time.modes import time_mode_of
from pyspark_dstl.spark.time.timers import MIN_EXPIRY_MS

ENTRY = "import-state"
KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map"}
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
    output_mode: str = "Update"  # the outputMode PySpark's call gave


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
    in_place: bool = False  # the Spark checkpoint's own location now belongs to this backend
    chained: tuple[str, ...] = ()  # the chained operators imported, described

    def describe(self) -> str:
        where = "moved in place" if self.in_place else "imported"
        steps = f", and the chained steps: {'; '.join(self.chained)}" if self.chained else ""
        return (f"{where} batch {self.batch_id}: {self.records} record(s) of "
                f"{len(self.variables)} state variable(s) ({', '.join(self.variables) or '-'}) "
                f"and timers, {self.partitions} state partitions, key "
                f"({', '.join(self.key_columns)}), time mode {self.time_mode}{steps}; Spark's "
                f"logs are at {self.engine_checkpoint}; the next batch is {self.batch_id + 1}")


# ---- the driver: reading Spark's metadata and state -------------------------------------------


def read_operator(spark: Any, checkpoint: SparkCheckpoint, batch_id: int) -> SparkOperator:
    """The one transformWithState operator of a checkpoint that chains no step after it."""
    operator, chained = read_operators(spark, checkpoint, batch_id)
    if chained:
        raise _chain_needs_query(checkpoint, chained)
    return operator


def read_operators(spark: Any, checkpoint: SparkCheckpoint, batch_id: int
                   ) -> tuple[SparkOperator, tuple[SparkStep, ...]]:
    """The query's first step, its transformWithState operator, and the stateful operators
    chained after it in query order (chain_import.py), from Spark's metadata reader."""
    if not (checkpoint.root / "state").is_dir():
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} has no state/ directory: its query has "
            f"no stateful operator, so there is no transformWithState state to import")
    try:
        with sparks_own_state_reads():
            rows = spark.read.format("state-metadata").load(str(checkpoint.root)).collect()
    except Exception as exc:  # Spark's AnalysisException and friends
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r}: Spark's state-metadata reader cannot "
            f"list its operators ({str(exc).splitlines()[0]:.200}); only transformWithState "
            f"queries of PySpark 4 can be imported") from exc
    steps = in_query_order(rows)
    if not steps or steps[0].kind != TRANSFORM:
        names = sorted({step.name for step in steps}) or ["none"]
        raise NoTransformWithStateError(
            f"Spark checkpoint {str(checkpoint.root)!r} has no transformWithState operator "
            f"as its first stateful step (operators: {', '.join(names)}); import-state reads "
            f"transformWithState / transformWithStateInPandas state only, and that of the "
            f"steps a query chains after it")
    first, chained = steps[0], tuple(steps[1:])
    for step in (first, *chained):
        if int(step.row["maxBatchId"]) < batch_id:
            raise IncompleteSparkCheckpointError(
                f"Spark checkpoint {str(checkpoint.root)!r}: the state metadata of "
                f"{step.describe()} ends at batch {step.row['maxBatchId']} but batch "
                f"{batch_id} is committed; restart the query on PySpark until it commits "
                f"again, stop it, then import")
    return spark_operator(first.row), chained


def spark_operator(row: Any) -> SparkOperator:
    """A transformWithState operator from its state-metadata row."""
    import json

    properties = json.loads(row["operatorProperties"] or "{}")
    variables = []
    for item in properties.get("stateVariables", []):
        name, kind = str(item["stateName"]), str(item["stateVariableType"])
        if name.startswith("$") or kind not in KINDS:
            continue  # timers and Spark's internal column families
        variables.append(SparkVariable(name, KINDS[kind], bool(item.get("ttlEnabled"))))
    return SparkOperator(int(row["operatorId"]), str(row["operatorName"]),
                         int(row["numPartitions"]),
                         _time_mode(properties.get("timeMode")), tuple(variables),
                         str(properties.get("outputMode") or "Update"))


def _chain_needs_query(checkpoint: SparkCheckpoint,
                       chained: Sequence[SparkStep]) -> NoTransformWithStateError:
    return NoTransformWithStateError(
        f"Spark checkpoint {str(checkpoint.root)!r} chains stateful operators after its "
        f"transformWithState ("
        + ", ".join(step.describe() for step in chained)
        + "); their state (open windows, seen keys) is imported only with the chained query "
        "itself: pass it as import_state(..., query=<the chained DataFrame>, output_mode=...), "
        "or start that query on the switch on the Spark checkpoint's location with "
        "spark.dstl.query.sparkCheckpoint=migrate (docs/migration.md)")


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
        with sparks_own_state_reads():
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

    def __init__(self, spec: OperatorSpec, settings: DstlSettings, logs: BatchLogs,
                 spark_time_mode: str, processor_name: str,
                 imported: Mapping[str, Any] | None = None) -> None:
        super().__init__(spec, settings)
        self.logs = logs
        self.spark_time_mode = spark_time_mode
        self.processor_name = processor_name
        self.imported = dict(imported or {})

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
                             "processor": self.processor_name, **self.imported}}


# ---- the whole import ------------------------------------------------------------------------


def tick_offsets(time_mode: str) -> list[str]:
    """The offsets a query of this backend reads beyond the Spark query's sources: the tick
    source's, for a query with a time mode (its engine checkpoint's entries need them)."""
    return [TICK_OFFSET] if time_mode != "none" else []


@dataclass(frozen=True)
class PreparedImport:
    """Everything read and checked before anything is written."""

    source: SparkCheckpoint
    logs: BatchLogs
    operator: SparkOperator
    processor: Any  # the PySpark StatefulProcessor
    schemas: dict[str, str]
    partitions: int
    records: Any  # DataFrame of import records (lazy: read when committed)
    key_columns: tuple[str, ...]
    targets: tuple[Target, ...]
    chain: tuple[ChainedImport, ...] = ()  # the chained steps' imports, in query order


def prepare_import(spark: Any, source: SparkCheckpoint, processor: Any,
                   chain: Sequence[ChainLink] = ()) -> PreparedImport:
    """Step 1 (module docstring): read and check, write nothing. `chain`: the steps the query
    chains after its transformWithState, planned for its output mode (their state comes too,
    chain_import.py)."""
    logs = source.last_committed()
    operator, chained = read_operators(spark, source, logs.batch_id)
    if chained and not chain:
        raise _chain_needs_query(source, chained)
    schemas, kinds = declarations(processor, operator.time_mode)
    check_processor(operator, kinds, processor)
    partitions = logs.shuffle_partitions or operator.num_partitions
    records, key_columns = import_records(spark, source, operator, logs.batch_id)
    targets = _targets(operator, records)
    imports: tuple[ChainedImport, ...] = ()
    if chained or chain:
        imports = plan_chain_import(spark, source, logs.batch_id, chained, chain,
                                    _chained_transform(spark, source, logs.batch_id))
    return PreparedImport(source, logs, operator, processor, schemas, partitions, records,
                          key_columns, targets, imports)


def _targets(operator: SparkOperator, records: Any) -> tuple[Target, ...]:
    fields = {f.name: f.dataType for f in records.schema.fields}
    return tuple(Target(v, _stored_type(v, fields[_value_column(i)]),
                        fields.get(_map_key_column(i)))
                 for i, v in enumerate(operator.variables))


def _chained_transform(spark: Any, source: SparkCheckpoint, batch_id: int
                       ) -> Callable[[SparkStep, ChainLink], tuple[Any, Any]]:
    """How a transformWithState chained after the first step is imported: as the first one,
    with the processor the query gives that step."""

    def plan(step: SparkStep, link: ChainLink) -> tuple[Any, Any]:
        operator = spark_operator(step.row)
        processor = link.processor.processor  # the PySpark processor inside its adapter
        schemas, kinds = declarations(processor, operator.time_mode)
        check_processor(operator, kinds, processor)
        records, key_columns = import_records(spark, source, operator, batch_id)
        if tuple(key_columns) != tuple(link.key_columns):
            raise ChainImportError(
                f"Spark checkpoint {str(source.root)!r}, {step.describe()} ({link.label}): "
                f"Spark's state is keyed by ({', '.join(key_columns)}), the step groups by "
                f"({', '.join(link.key_columns)}): give the chained query the Spark "
                f"checkpoint was written by")
        return records, StateImporter(processor, schemas, _targets(operator, records))

    return plan


def commit_import(spark: Any, prepared: PreparedImport, url: str, *, name: str | None = None,
                  settings: Mapping[str, Any] | None = None,
                  imported: Mapping[str, Any] | None = None) -> tuple[str, int]:
    """Step 2: the stage and its commit entry as Spark's batch N; (the entry's path, the
    records written). `imported`: more to record in the entry's `extra["imported"]`."""
    from pyspark.sql.types import LongType, StructField, StructType

    operator = prepared.operator
    overrides: dict[str, Any] = dict(settings or {})
    overrides[QUERY_PREFIX + "checkpointLocation"] = url
    overrides[QUERY_PREFIX + "partitions"] = prepared.partitions
    overrides[QUERY_PREFIX + "outputMode"] = "collect"
    if name is not None:
        overrides[QUERY_PREFIX + "operatorName"] = name
    resolved = DstlSettings.from_session(spark, overrides)
    mode = "none" if operator.time_mode == "none" else "processing_time"
    spec = OperatorSpec(processor=StateImporter(prepared.processor, prepared.schemas,
                                                prepared.targets),
                        key_columns=prepared.key_columns,
                        output_schema=StructType([StructField("imported", LongType())]),
                        location=url, partitions=prepared.partitions,
                        name=resolved.query.operator_name, time=TimeSpec(mode),
                        chain=tuple(item.link for item in prepared.chain))
    importer = ImportOperator(spec, resolved, prepared.logs, operator.time_mode,
                              type(prepared.processor).__name__,
                              {"spark_operator": operator.name,
                               "spark_output_mode": operator.output_mode,
                               "spark_checkpoint": prepared.source.url, **dict(imported or {})})
    result = importer.execute(prepared.records, prepared.logs.batch_id)
    chained: list[StageResult] = []
    try:
        # nothing fires while the records are written: the chained stages' clocks are the
        # earliest time there is, as the first one's
        earliest = ChainWatermarks(MIN_EXPIRY_MS, MIN_EXPIRY_MS)
        for step, item in zip(importer.chained, prepared.chain, strict=True):
            chained.append(step.execute(item.records, result, earliest))
        path = importer.commit(result, chained)
    finally:
        for done in (result, *chained):
            importer.release(done)
        fencing.hold(importer).release("import-state finished")
    return path, sum(r.input_rows for done in (result, *chained)
                     for r in done.reports.values())
