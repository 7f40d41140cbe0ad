"""Export of the steps a query chains after its transformWithState: Spark's own operators of
those steps write their state in the same staging query as the first step (export_state.py),
from this backend's state of each step, so the chained query goes on on PySpark's operators
with exactly the state this backend's steps held after batch M. The mirror of
chain_import.py: the same pairs of buffers, its refusals and one more (below).

The staging query has the user's chain of stateful operators, in the same number, order and
kinds, so Spark gives each the operator id it has in the user's query (the step nearest the
sink is 0). Its first step, the export's StateWriter, writes the first step's state and passes
each chained step's records on as rows of staging columns (typed by the `Stager` of the step,
in the writer's task); each chained step of the staging query takes the rows meant for it:

- an aggregation (`groupBy(...).agg(...)`) is Spark's own over the same grouping key (a window
  as struct<start, end>, plain keys) with aggregates whose buffers equal the stored ones:
  per key as many rows as its largest count (generated inside the JVM), count over the rows
  that count, sum, min and max over one row holding the value, avg over one row holding the
  sum and count-1 rows of 0, first and last over the value in every row (same ignoreNulls);
- `dropDuplicates`: one row per seen key; `dropDuplicatesWithinWatermark`: one row per seen
  key whose event time is its expiry less the watermark delay;
- a transformWithState: one row per record of its state (values, list elements, map entries,
  timers, as export_records.py reads the first step's), grouped by the step's key columns into
  Spark's transformWithState of the step, whose processor is the step's own StateWriter
  (export_writer.py): its processor declares the variables, the records are written into them.
  Its TTL'd records travel in the staging batch of their write time, as the first step's (the
  two steps' write times make one list of stages), so Spark computes the same expiries; its
  processing-time timers are written before any is due. The rows of the steps after it pass
  through its writer unchanged (their step column is not its own), so a chain such as
  transformWithState, transformWithState, aggregation goes back whole.

Spark checks a resumed operator's state schema against the stored one ignoring field names but
not nullability in one direction (a nullable stored field against a non-null one of the query
is refused), so a staged key column is non-null where the user's query's is (its template says
so). PySpark 4.3 stores these operators' schemas with every field nullable, where the check
passes either way; the staging does not rely on that.

Refused by name (Spark's operator id, the step, why), before anything is written: what
chain_import.py refuses (session windows, collect_list, decimal sum and avg) and a stateful
step after a chained aggregation or deduplication (the rows meant for it cannot pass Spark's
operator of that step without becoming its state: an aggregation adds them to its buffers, a
deduplication to its seen keys; no staging keeps them apart, and none is approximated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.spark.chain.aggregation import MICROS_PER_MS, AggregationPlan, BufferCodec
from pyspark_dstl.spark.chain.aggregation import STATE_NAME as AGGREGATE_STATE
from pyspark_dstl.spark.chain.dedup import STATE_NAME as DEDUP_STATE
from pyspark_dstl.spark.chain.dedup import DedupPlan
from pyspark_dstl.spark.chain.links import (
    AGGREGATE,
    DEDUPLICATE,
    DEDUPLICATE_WITHIN_WATERMARK,
    SESSION_AGGREGATE,
    TRANSFORM,
    ChainLink,
)
from pyspark_dstl.spark.codec.values import decode_key, decode_value
from pyspark_dstl.spark.operator_list import QueryOperator
from pyspark_dstl.spark.spark_errors import MoveError

STEP = "dstl_export_step"  # the staging rows' chained step (0: none, a first-step record)
EVENT_COLUMN = "__dstl_export_event"  # the staging rows' event time, at one second
SAME_BUFFERS = ("count", "sum", "avg", "min", "max", "first", "last")
KIND_WORDS = {
    AGGREGATE: "an aggregation", SESSION_AGGREGATE: "a session window aggregation",
    DEDUPLICATE: "dropDuplicates", DEDUPLICATE_WITHIN_WATERMARK: "dropDuplicatesWithinWatermark",
    TRANSFORM: "a transformWithState",
}
STAGED = (AGGREGATE, DEDUPLICATE, DEDUPLICATE_WITHIN_WATERMARK, TRANSFORM)
# a chained transformWithState's staging columns after its key columns (as its writer reads
# them: the records' variable index, list position, value, map key and timer)
TRANSFORM_RECORD = ("variable", "position", "value", "map_key", "timer")


class ExportStateError(MoveError):
    """export-state cannot write a Spark checkpoint from this location as asked; the first line
    names the location, the target, the operator or the state variable, and the fix."""


def column(position: int, name: str) -> str:
    return f"dstl_export_s{position}_{name}"


def refuse_unstaged(where: str, operators: Sequence[QueryOperator]) -> None:
    """What no staging query can write exactly, read from the commit entry's records of the
    chained steps (no query needed): refused by name."""
    chained = [op for op in operators if op.position > 0]
    for index, op in enumerate(chained):
        culprit = (f"{where}, step {op.position} {op.label or op.kind} (Spark's operator "
                   f"{op.spark_operator_id})")
        fix = ("keep the query on this backend, or start the chained query on PySpark's "
               "operators from its input")
        if op.kind == SESSION_AGGREGATE:
            raise ExportStateError(
                f"{culprit}: the state of a session window aggregation cannot be exported "
                f"exactly: Spark keeps a key's sessions in a layout of its own that no staging "
                f"query writes from this backend's; {fix}")
        state = dict(op.record.get("state") or {})
        for function, output, buffers in state.get("aggregates") or []:
            decimal = any("decimal" in str(kind) for kind in buffers)
            if function not in SAME_BUFFERS or (function in ("sum", "avg") and decimal):
                what = (f"a decimal {function}" if decimal and function in SAME_BUFFERS
                        else str(function))
                raise ExportStateError(
                    f"{culprit}: the aggregate {output!r} ({what}) cannot be exported exactly: "
                    f"Spark's buffer for it is not the one this backend keeps"
                    f"{' (a serialized array)' if function == 'collect_list' else ''}; {fix}")
        if op.kind not in STAGED:
            raise ExportStateError(
                f"{culprit}: the state of {KIND_WORDS.get(op.kind, op.kind)} after the first "
                f"step is not exported yet (export-state stages aggregations, "
                f"dropDuplicates, dropDuplicatesWithinWatermark and transformWithState); "
                f"{fix}")
        if index + 1 < len(chained) and op.kind != TRANSFORM:
            raise ExportStateError(
                f"{culprit}: a stateful step follows it ({chained[index + 1].label}); the "
                f"staging rows of that step cannot pass Spark's operator of "
                f"{KIND_WORDS.get(op.kind, op.kind)} without becoming its state (its "
                f"buffers, or its seen keys), so export-state stages stateful steps after a "
                f"chained step only when that step is a transformWithState (whose writer "
                f"passes them on); {fix}")


@dataclass(frozen=True)
class ChainedExport:
    """One chained step of the export: Spark's operator id, the query's link, the stager
    that turns its stored entries into staging rows (in the writer's task)."""

    position: int
    operator: QueryOperator
    link: ChainLink
    stager: Any  # AggregationStager | DedupStager | TransformStager
    writer: Any = None  # a transformWithState's StateWriter (export_state.py makes it)

    def describe(self) -> str:
        return (f"Spark's operator {self.operator.spark_operator_id}: {self.link.label} as "
                f"step {self.position}")


def plan_chain_export(where: str, operators: Sequence[QueryOperator],
                      links: Sequence[ChainLink], grouped: bool) -> tuple[ChainedExport, ...]:
    """Pair the location's chained operators with the query's chained steps (in number and
    kind, and the state each keeps), after the refusals that need no query."""
    refuse_unstaged(where, operators)
    chained = [op for op in operators if op.position > 0]
    if len(chained) != len(links):
        raise ExportStateError(
            f"{where} chains {len(chained)} stateful step(s) after its transformWithState ("
            + (", ".join(op.label or op.kind for op in chained) or "none")
            + f") but the query given chains {len(links)} ("
            + (", ".join(link.label for link in links) or "none")
            + "): give the chained query the location ran (query=..., and its output_mode)")
    planned = []
    for op, link in zip(chained, links, strict=True):
        culprit = f"{where}, step {op.position} (Spark's operator {op.spark_operator_id})"
        if op.kind != link.kind or dict(op.record.get("state") or {}) != dict(
                link.record.get("state") or {}):
            raise ExportStateError(
                f"{culprit}: the location ran {op.label or op.kind} there, but step "
                f"{op.position} of the query given is {link.label} "
                f"({KIND_WORDS.get(link.kind, link.kind)}) with other state: give the chained "
                f"query the location ran")
        if link.kind == AGGREGATE:
            stager: Any = AggregationStager(op.position, link.processor.plan, grouped,
                                            _aggregation_fields(op.position, link))
        elif link.kind == TRANSFORM:
            stager = TransformStager(op.position, _transform_fields(op))
        else:
            stager = DedupStager(op.position, link.processor.plan, grouped,
                                 _dedup_fields(op.position, link))
        planned.append(ChainedExport(op.position, op, link, stager))
    return tuple(planned)


# ---- the staging columns --------------------------------------------------------------------


def _aggregation_fields(position: int, link: ChainLink) -> list[Any]:
    """Staging columns: the key columns (a window as start and end), each aggregate's buffers,
    and how many rows the key needs."""
    from pyspark.sql.types import BooleanType, DoubleType, LongType, StructField

    plan: AggregationPlan = link.processor.plan
    schema = link.template.schema
    fields = []
    index = 0
    for part in plan.keys:
        if part.output is None:
            index += 1
            continue
        if part.window:
            window = schema[part.output].dataType
            fields += [StructField(column(position, f"k{index}"), window["start"].dataType),
                       StructField(column(position, f"k{index + 1}"), window["end"].dataType)]
            index += 2
        else:
            fields.append(StructField(column(position, f"k{index}"),
                                      schema[part.output].dataType))
            index += 1
    buffer = 0
    for spec in plan.aggregates:
        result = schema[spec.output].dataType
        if spec.function == "count":
            kinds: list[Any] = [LongType()]
        elif spec.function == "avg":
            kinds = [DoubleType(), LongType()]
        elif spec.function in ("first", "last"):
            kinds = [result, BooleanType()]
        else:
            kinds = [result]
        for kind in kinds:
            fields.append(StructField(column(position, f"b{buffer}"), kind))
            buffer += 1
    fields.append(StructField(column(position, "rows"), LongType()))
    return fields


def _dedup_fields(position: int, link: ChainLink) -> list[Any]:
    from pyspark.sql.types import LongType, StructField

    plan: DedupPlan = link.processor.plan
    keys = [StructField(column(position, f"k{i}"), link.output_schema[name].dataType)
            for i, name in enumerate(plan.key_columns)]
    if plan.within_watermark:  # the event time whose expiry the key keeps (microseconds)
        keys.append(StructField(column(position, "time"), LongType()))
    return keys


def _transform_fields(op: QueryOperator) -> list[Any]:
    """Staging columns: the step's key columns (the types its commit records), then the
    record columns of its writer."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StructField,
        _parse_datatype_string,
    )

    keys = [StructField(column(op.position, f"k{i}"), _parse_datatype_string(kind))
            for i, kind in enumerate(op.key_types)]
    kinds = (IntegerType(), IntegerType(), BinaryType(), BinaryType(), LongType())
    return [*keys, *(StructField(column(op.position, name), kind)
                     for name, kind in zip(TRANSFORM_RECORD, kinds, strict=True))]


@dataclass(frozen=True)
class TransformStager:
    """A record of a chained transformWithState (export_records.py packs it: its grouping key
    as `pack_key` bytes, the rest as one msgpack array) -> its staging row."""

    position: int
    fields: list[Any]

    def row(self, key: bytes, raw: bytes) -> tuple[Any, ...]:
        import msgpack

        variable, position, value, map_key, timer = msgpack.unpackb(raw, raw=False)
        return (*decode_key(key, "grouping key", grouped=False), variable, position, value,
                map_key, timer)


@dataclass(frozen=True)
class AggregationStager:
    """A stored aggregation entry -> its staging row: key values, buffer values, row count."""

    position: int
    plan: AggregationPlan
    grouped: bool
    fields: list[Any]

    def row(self, key: bytes, raw: bytes) -> tuple[Any, ...]:
        plan = self.plan
        values = decode_key(key, plan.label, grouped=self.grouped)
        shown = [value for part, start in _key_offsets(plan)
                 if part.output is not None
                 for value in values[start:start + len(part.columns)]]
        _, stored = decode_value(raw, 0, AGGREGATE_STATE)
        buffers = [array[0].as_py() for array in BufferCodec(plan).decode([stored])]
        rows, at = 1, 0
        for spec in plan.aggregates:
            if spec.function == "count":
                rows = max(rows, int(buffers[at] or 0))
            elif spec.function == "avg":
                rows = max(rows, int(buffers[at + 1] or 0))
            at += spec.width
        return (*shown, *buffers, rows)


def _key_offsets(plan: AggregationPlan) -> list[tuple[Any, int]]:
    offsets, start = [], 0
    for part in plan.keys:
        offsets.append((part, start))
        start += len(part.columns)
    return offsets


@dataclass(frozen=True)
class DedupStager:
    """A seen key of dropDuplicates -> its staging row (the key's values)."""

    position: int
    plan: DedupPlan
    grouped: bool
    fields: list[Any]

    def row(self, key: bytes, raw: bytes) -> tuple[Any, ...]:
        values = tuple(decode_key(key, self.plan.label, grouped=self.grouped))
        if not self.plan.within_watermark:
            return values
        _, expires = decode_value(raw, 0, DEDUP_STATE)
        return (*values, int(expires) - self.plan.delay_ms * MICROS_PER_MS)


def staging_fields(exports: Sequence[ChainedExport]) -> list[Any]:
    """The staging columns the first step's writer emits, after the step column."""
    return [field for export in exports for field in export.stager.fields]


# ---- the staging steps ----------------------------------------------------------------------


def _keyed(name: str, kind: Any, nullable: bool) -> Any:
    """A staged key column, non-null where the user's query's is (Spark's schema check): the
    column, or else a non-null literal of its type, which no row takes (its rows hold keys)."""
    from pyspark.sql import functions as F

    if nullable:
        return F.col(name)
    return F.coalesce(F.col(name), _zero(name, kind))


def _zero(name: str, kind: Any) -> Any:
    """A non-null literal of Spark type `kind` (casts Spark's ANSI mode allows)."""
    import datetime as dt

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(kind, T.StringType):
        return F.lit("")
    if isinstance(kind, T.BooleanType):
        return F.lit(False)
    if isinstance(kind, T.BinaryType):
        return F.lit(bytearray())
    if isinstance(kind, T.DateType):
        return F.lit(dt.date(1970, 1, 1))
    if isinstance(kind, T.TimestampType):
        return F.lit(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
    if isinstance(kind, T.TimestampNTZType):
        return F.lit(dt.datetime(1970, 1, 1))
    if isinstance(kind, T.NumericType):
        return F.lit(0).cast(kind)
    raise ExportStateError(
        f"key column {name!r} of type {kind.simpleString()}: the export stages non-null keys "
        f"of strings, numbers, booleans, binary, dates and timestamps only; keep the query on "
        f"this backend")


def stage_step(frame: Any, export: ChainedExport, later: Sequence[ChainedExport] = ()) -> Any:
    """Spark's own operator of the chained step over the rows meant for it (a
    transformWithState also over those of the `later` steps, which it passes on)."""
    from pyspark.sql import functions as F

    if export.link.kind == TRANSFORM:
        return _stage_transform(frame.where(F.col(STEP) >= export.position), export, later)
    rows = frame.where(F.col(STEP) == export.position)
    if export.link.kind in (DEDUPLICATE, DEDUPLICATE_WITHIN_WATERMARK):
        return _stage_dedup(rows, export)
    return _stage_aggregation(rows, export, F)


def _stage_dedup(rows: Any, export: ChainedExport) -> Any:
    plan: DedupPlan = export.link.processor.plan
    schema = export.link.output_schema
    keys = [_keyed(column(export.position, f"k{i}"), schema[name].dataType,
                   schema[name].nullable).alias(name)
            for i, name in enumerate(plan.key_columns)]
    if not plan.within_watermark:
        return rows.select(*keys).dropDuplicates(list(plan.key_columns))
    from pyspark.sql import functions as F

    # Spark keeps expiresAtMicros = event time + the watermark delay: the event time is the
    # stored expiry less the delay, under a watermark of the same delay
    assert plan.event_time_column is not None
    time = F.timestamp_micros(F.col(column(export.position, "time")))
    named = [key for key, name in zip(keys, plan.key_columns, strict=True)
             if name != plan.event_time_column]
    return (rows.select(*named, time.alias(plan.event_time_column))
            .withWatermark(plan.event_time_column, f"{plan.delay_ms} milliseconds")
            .dropDuplicatesWithinWatermark(list(plan.key_columns)))


def passed_columns(later: Sequence[ChainedExport]) -> list[str]:
    """What a chained transformWithState's writer passes on: the step column and the staging
    columns of the steps after it."""
    return [STEP, *(field.name for field in staging_fields(later))] if later else []


def _stage_transform(rows: Any, export: ChainedExport, later: Sequence[ChainedExport]) -> Any:
    """Spark's transformWithState of the step, its processor's state written by the step's
    StateWriter from the records its rows carry (grouped by the step's key columns); the rows
    of the later steps pass through it (in the null key's group) unchanged."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructField, StructType

    from pyspark_dstl.spark.moves.export_records import (
        EXPIRY,
        MAP_KEY,
        POSITION,
        TIMER,
        VALUE,
        VARIABLE,
        WRITE_TIME,
    )
    from pyspark_dstl.spark.time.modes import PYSPARK_WORDS

    p, link = export.position, export.link
    keys = [F.col(column(p, f"k{i}")).alias(name) for i, name in enumerate(link.key_columns)]
    named = dict(zip(TRANSFORM_RECORD, (VARIABLE, POSITION, VALUE, MAP_KEY, TIMER),
                     strict=True))
    records = [F.col(column(p, name)).alias(named[name]) for name in TRANSFORM_RECORD]
    staged = rows.select(*keys, F.col(column(p, "variable")).alias(VARIABLE),
                         *records[1:4], F.lit(None).cast("long").alias(EXPIRY),
                         records[4], F.lit(None).cast("long").alias(WRITE_TIME),
                         *passed_columns(later))
    time_mode = str(dict(link.record.get("state") or {}).get("time_mode", "none"))
    if time_mode == "event_time":
        staged = staged.withColumn(EVENT_COLUMN, F.lit(1).cast("timestamp")).withWatermark(
            EVENT_COLUMN, "0 seconds")
    adapter = link.processor
    method = pyspark_method(staged.groupBy(*link.key_columns), adapter.entry)
    output: Any = (StructType([StructField(STEP, IntegerType()), *staging_fields(later)])
                   if later else "exported long")
    return method(statefulProcessor=export.writer, outputStructType=output,
                  outputMode=adapter.output_mode, timeMode=PYSPARK_WORDS.get(time_mode, "None"))


def pyspark_method(grouped: Any, name: str) -> Any:
    """PySpark's own GroupedData method, also while the switch is installed."""
    method = getattr(type(grouped), name, None)
    if method is None:
        import pyspark

        raise ExportStateError(f"{name}: PySpark {pyspark.__version__} has no {name}, the call "
                               f"the query makes; run the export (and the query) on a PySpark "
                               f"release that has it")
    if getattr(method, "__dstl_entry__", False):
        method = method.__wrapped__
    return lambda *args, **kwargs: method(grouped, *args, **kwargs)


def _stage_aggregation(rows: Any, export: ChainedExport, F: Any) -> Any:
    plan: AggregationPlan = export.link.processor.plan
    schema = export.link.template.schema
    p = export.position
    number = column(p, "row")
    exploded = rows.select("*", F.explode(F.sequence(F.lit(1).cast("long"),
                                                     F.col(column(p, "rows")))).alias(number))
    r = F.col(number)
    group = []
    for part, start in _key_offsets(plan):
        if part.output is None:
            continue
        if part.window:
            group.append(F.struct(F.col(column(p, f"k{start}")).alias("start"),
                                  F.col(column(p, f"k{start + 1}")).alias("end"))
                         .alias(part.output))
        else:
            field = schema[part.output]
            group.append(_keyed(column(p, f"k{start}"), field.dataType, field.nullable)
                         .alias(part.output))
    aggregates = []
    at = 0
    for spec in plan.aggregates:
        buffer = F.col(column(p, f"b{at}"))
        if spec.function == "count":
            aggregates.append(F.count(F.when(r <= buffer, F.lit(1))).alias(spec.output))
        elif spec.function in ("sum", "min", "max"):
            one = F.when(r == 1, buffer)
            made = {"sum": F.sum, "min": F.min, "max": F.max}[spec.function](one)
            aggregates.append(made.alias(spec.output))
        elif spec.function == "avg":
            counted = F.col(column(p, f"b{at + 1}"))
            value = F.when(r == 1, buffer).when(r <= counted, F.lit(0.0))
            aggregates.append(F.avg(value).alias(spec.output))
        else:  # first, last: the value in every row (a flag unset: null, ignoreNulls)
            function = F.first if spec.function == "first" else F.last
            aggregates.append(function(buffer, ignorenulls=spec.ignore_nulls)
                              .alias(spec.output))
        at += spec.width
    return exploded.groupBy(*group).agg(*aggregates)

