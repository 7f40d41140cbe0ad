"""Planning a chained step where it is written: what Spark would accept, and the `ChainLink`
that runs it.

Every step is first applied, as written, to an empty batch DataFrame of its input's schema
(the template), so Spark itself resolves the columns, names the outputs, types the results and
refuses what it refuses, at the call. The template's columns carry Spark's watermark
metadata (`spark.watermarkDelayMs`) where the first step's eventTimeColumnName put it, and
Spark's own analysis moves it on (to a `window` over it, through aliases), which is how a step
learns which column holds event time, exactly as Spark's planner does.

What depends on the query's output mode (append, update, complete) is settled when the query
starts (`for_output_mode`), with Spark's rules and Spark's words for what it refuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.spark.chain.aggregates import ALIASES, FUNCTIONS, AggregateSpec
from pyspark_dstl.spark.chain.aggregation import (
    AggregationPlan,
    AggregationProcessor,
    KeyPart,
)
from pyspark_dstl.spark.chain.dedup import DeduplicationProcessor, DedupPlan
from pyspark_dstl.spark.chain.expressions import STAR, Literal, Read, read_column
from pyspark_dstl.spark.chain.links import (
    AGGREGATE,
    DEDUPLICATE,
    DEDUPLICATE_WITHIN_WATERMARK,
    SESSION_AGGREGATE,
    TRANSFORM,
    ChainLink,
)
from pyspark_dstl.spark.chain.session_windows import SessionAggregationProcessor
from pyspark_dstl.spark.pyspark_versions import arrow_schema
from pyspark_dstl.spark.spark_errors import ChainedStepError
from pyspark_dstl.spark.time.modes import EVENT_TIME, NO_TIME_MODE, PROCESSING_TIME
from pyspark_dstl.spark.time.query_time import WATERMARK_METADATA

INTERNAL = "__dstl_"
APPEND, UPDATE, COMPLETE = "append", "update", "complete"
QUERY_OUTPUT_MODES = (APPEND, UPDATE, COMPLETE)
APPROXIMATE = "approx_count_distinct"


@dataclass(frozen=True)
class StepInput:
    """What a chained step reads: the previous step's output after the stateless steps in
    between, as a template (watermark metadata included), and how a batch's output of the
    previous step becomes that (`before`). `swallowed`: an earlier transformWithState runs in
    processing time, so no watermark reaches this step (Spark's value for none, 0, does)."""

    template: Any
    before: Callable[[Any], Any]
    swallowed: bool = False
    entry: str = "transformWithStateInPandas"  # the first step's call, for messages


def event_time_column(schema: Any) -> str | None:
    """The column of `schema` that carries the watermark, if one does; two are refused."""
    marked = [f.name for f in schema.fields if WATERMARK_METADATA in (f.metadata or {})]
    if len(marked) > 1:
        raise ChainedStepError(
            f"columns {marked} all carry the watermark: Spark allows one event-time column "
            f"per stream; keep one of them (drop or recompute the others)")
    return marked[0] if marked else None


def watermark_delay_ms(schema: Any, column: str) -> int:
    return int(schema[column].metadata[WATERMARK_METADATA])


def with_event_time(spark: Any, schema: Any, column: str | None, delay_ms: int | None) -> Any:
    """An empty batch DataFrame of `schema` whose `column` carries the watermark metadata
    (what Spark's UpdateEventTimeWatermarkColumn puts on eventTimeColumnName)."""
    from pyspark.sql.types import StructField, StructType

    if column is None or delay_ms is None:
        return spark.createDataFrame([], schema)
    fields = [StructField(f.name, f.dataType, f.nullable,
                          {**(f.metadata or {}), WATERMARK_METADATA: delay_ms}
                          if f.name == column else f.metadata)
              for f in schema.fields]
    return spark.createDataFrame([], StructType(fields))


# --- aggregations ---------------------------------------------------------------------------

def plan_aggregation(source: StepInput, columns: Sequence[Any], exprs: Sequence[Any],
                     label: str) -> ChainLink:
    """`groupBy(*columns).agg(*exprs)` after the first stateful step."""
    from pyspark.sql import functions as F

    group_by = [F.col(c) if isinstance(c, str) else c for c in _flat(columns)]
    if not exprs:
        raise ChainedStepError(f"{label}: give at least one aggregate, e.g. .count() or "
                               f".agg(F.sum('v'))")
    template = source.template.groupBy(*group_by).agg(*exprs)  # Spark's analysis and errors
    repeated = sorted({name for name in template.columns if template.columns.count(name) > 1})
    if repeated:
        raise ChainedStepError(
            f"{label}: the output has several columns named {', '.join(map(repr, repeated))}; "
            f"give each aggregate its own name with .alias(...)")
    fields = template.schema.fields
    group_fields, agg_fields = fields[:len(group_by)], fields[len(group_by):]
    parts, selections, session, event_part = _key_parts(group_by, group_fields, label)
    specs, arguments = _aggregate_specs(source.template, exprs, agg_fields, label)
    windows = [part for part in parts if part.window]

    def project(frame: Any) -> Any:
        frame = source.before(frame).select(*selections, *arguments)
        if not windows:
            return frame
        wanted = []
        for part in parts:
            if part.window:
                whole = part.columns[0].rsplit("_", 1)[0]
                frame = frame.where(F.col(whole).isNotNull())
                wanted += [F.col(f"{whole}.start").alias(part.columns[0]),
                           F.col(f"{whole}.end").alias(part.columns[1])]
            else:
                wanted.append(F.col(part.columns[0]))
        return frame.select(*wanted, *[F.col(f"{INTERNAL}a{j}")
                                       for j in range(len(arguments))])

    prepared = project(source.template)
    zone = str(source.template.sparkSession.conf.get("spark.sql.session.timeZone"))
    arrow = arrow_schema(prepared.schema, zone)
    result_types = arrow_schema(template.schema, zone)
    typed = tuple(dataclasses.replace(spec, result_type=result_types.field(spec.output).type,
                                      sum_type=_sum_type(spec, arrow))
                  for spec in specs)
    key_columns = tuple(c for part in parts for c in part.columns)
    plan = AggregationPlan(
        keys=tuple(parts), aggregates=typed, output_names=tuple(template.columns),
        key_types=tuple(arrow.field(c).type for c in key_columns), mode=APPEND,
        event_time_column=(event_part.columns[-1] if event_part is not None else None),
        label=label)
    kind = SESSION_AGGREGATE if session is not None else AGGREGATE
    if session is not None and len(parts) == 1:
        raise ChainedStepError(
            f"{label}: Global aggregation with session window in streaming query is not "
            f"supported (Spark refuses it too); group by a key as well, e.g. "
            f"groupBy('key', session_window(...))")
    if session is not None:
        processor: Any = SessionAggregationProcessor(plan, session)
        state_keys = tuple(c for part in parts if part is not session for c in part.columns)
    else:
        processor = AggregationProcessor(plan)
        state_keys = key_columns
    return ChainLink(
        kind=kind, label=label, processor=processor, key_columns=state_keys,
        output_schema=template.schema, template=template, prepare=project,
        time_mode=EVENT_TIME if plan.event_time_column is not None else NO_TIME_MODE,
        late_column=plan.event_time_column,
        record={"state": _state_record(plan, kind)})


def _key_parts(group_by: Sequence[Any], fields: Sequence[Any], label: str
               ) -> tuple[list[KeyPart], list[Any], KeyPart | None, KeyPart | None]:
    """The key parts (flattened into internal columns), what to select for them, the session
    window's part and the part that carries event time."""
    from pyspark.sql import functions as F

    parts: list[KeyPart] = []
    selections: list[Any] = []
    session = event_part = None
    for index, (column, field) in enumerate(zip(group_by, fields, strict=True)):
        read = read_column(column)
        function = read.call.name if read.call is not None else None
        if function in ("window", "session_window"):
            whole = f"{INTERNAL}k{index}"
            part = KeyPart(field.name, (f"{whole}_start", f"{whole}_end"))
            selections.append(column.alias(whole))
            if function == "session_window":
                session = part
        else:
            part = KeyPart(field.name, (f"{INTERNAL}k{index}",))
            selections.append(column.alias(part.columns[0]))
        if WATERMARK_METADATA in (field.metadata or {}):
            if event_part is not None:
                raise ChainedStepError(
                    f"{label}: grouping columns {event_part.output!r} and {field.name!r} both "
                    f"carry the watermark; Spark allows one event-time column per "
                    f"aggregation, group by one of them")
            event_part = part
        parts.append(part)
    if not parts:  # a global aggregation: one constant key, not shown
        parts.append(KeyPart(None, (f"{INTERNAL}k0",)))
        selections.append(F.lit(0).alias(f"{INTERNAL}k0"))
    if session is not None and event_part is not session:
        raise ChainedStepError(
            f"{label}: the session window must be over the event-time column (the column "
            f"named by eventTimeColumnName, which carries the watermark)")
    return parts, selections, session, event_part


def _aggregate_specs(template: Any, exprs: Sequence[Any], fields: Sequence[Any], label: str
                     ) -> tuple[list[AggregateSpec], list[Any]]:
    """One spec per aggregate column and the argument columns to select for them."""
    specs: list[AggregateSpec] = []
    arguments: list[Any] = []
    for expr, field in zip(exprs, fields, strict=True):
        read = read_column(expr)
        function = _function_of(read, label)
        call = read.call
        assert call is not None
        columns = [arg for arg in call.args if arg is not STAR and not isinstance(arg, Literal)]
        literals = [arg.value for arg in call.args if isinstance(arg, Literal)]
        ignore_nulls = function in ("first", "last") and bool(literals and literals[0])
        if function == "count":
            if any(value is None for value in literals):
                raise ChainedStepError(f"{label}: {read.text}: count of a null literal is "
                                       f"always 0; count a column or count('*')")
            inputs = columns
        else:
            if len(columns) != 1:
                raise ChainedStepError(f"{label}: {read.text}: {function} takes one column "
                                       f"here")
            inputs = columns
        names = []
        for column in inputs:
            name = f"{INTERNAL}a{len(arguments)}"
            arguments.append(_argument(template, column, function, name))
            names.append(name)
        # result types come from the template; a placeholder until planning fills them in
        specs.append(AggregateSpec(field.name, function, tuple(names), _placeholder(),
                                   ignore_nulls=ignore_nulls))
    return specs, arguments


def _function_of(read: Read, label: str) -> str:
    if read.call is None:
        raise ChainedStepError(
            f"{label}: {read.text} is not an aggregate function; give aggregates such as "
            f"F.count('*'), F.sum('v') (supported: {', '.join(FUNCTIONS)})")
    name = ALIASES.get(read.call.name, read.call.name)
    if read.call.distinct:
        raise ChainedStepError(
            f"{label}: {read.text}: Distinct aggregations are not supported on streaming "
            f"DataFrames/Datasets (in Spark either); count distinct values with "
            f".dropDuplicates([...]) before the aggregation")
    if name == APPROXIMATE:
        raise ChainedStepError(
            f"{label}: {read.text}: approx_count_distinct is not supported after a stateful "
            f"step on this backend: its result is Spark's HyperLogLog++ estimate, which this "
            f"backend cannot reproduce value for value; count distinct values exactly with "
            f".dropDuplicates([<keys>, <column>]) followed by .groupBy(<keys>).count(), or "
            f"compute it on each batch in .writeStream.foreachBatch(...)")
    if name not in FUNCTIONS and _holds_aggregate(read):
        raise ChainedStepError(
            f"{label}: {read.text} computes over aggregates, which is not supported after a "
            f"stateful step on this backend; aggregate plainly (e.g. "
            f"F.sum('v').alias('total')) and compute the rest in a stateless step after the "
            f"aggregation, e.g. .withColumn('more', F.col('total') + 1)")
    if name not in FUNCTIONS:
        raise ChainedStepError(
            f"{label}: {read.text}: the aggregate function {read.call.name!r} is not supported "
            f"after a stateful step on this backend (supported: {', '.join(FUNCTIONS)}); "
            f"compute it on each batch in .writeStream.foreachBatch(...), or write this "
            f"output to a table and aggregate that in a second query")
    return name


def _holds_aggregate(read: Read) -> bool:
    """Whether an argument of the call, at any depth, is an aggregate function."""
    if read.call is None:
        return False
    for argument in read.call.args:
        if argument is STAR or isinstance(argument, Literal):
            continue
        inner = read_column(argument)
        if inner.call is not None and (ALIASES.get(inner.call.name, inner.call.name)
                                       in (*FUNCTIONS, APPROXIMATE) or _holds_aggregate(inner)):
            return True
    return False


def _argument(template: Any, column: Any, function: str, name: str) -> Any:
    """The argument as it is selected: cast to the type Spark sums in (sum: the result type;
    avg: double, or decimal(p+10, s))."""
    from pyspark.sql.types import DecimalType, DoubleType

    if function not in ("sum", "avg"):
        return column.alias(name)
    kind = template.select(column).schema.fields[0].dataType
    if function == "sum":
        summed = template.select(_sum_of(column)).schema.fields[0].dataType
        return column.cast(summed).alias(name)
    if isinstance(kind, DecimalType):
        return column.cast(DecimalType(min(38, kind.precision + 10), kind.scale)).alias(name)
    return column.cast(DoubleType()).alias(name)


def _sum_of(column: Any) -> Any:
    from pyspark.sql import functions as F

    return F.sum(column)


def _sum_type(spec: AggregateSpec, arrow: Any) -> Any:
    if spec.function != "avg":
        return None
    return arrow.field(spec.inputs[0]).type


def _placeholder() -> Any:
    import pyarrow as pa

    return pa.null()


def _state_record(plan: AggregationPlan, kind: str) -> dict[str, Any]:
    """What the commit entry keeps of an aggregation's state: its keys and buffers, so a
    restart with another aggregation is refused instead of misreading the buffers."""
    return {"kind": kind,
            "keys": [[part.output, len(part.columns)] for part in plan.keys],
            "key_types": [str(kind) for kind in plan.key_types],
            "aggregates": [[spec.function, spec.output, [str(t) for t in spec.buffer_types]]
                           for spec in plan.aggregates]}


def _flat(columns: Sequence[Any]) -> list[Any]:
    flat: list[Any] = []
    for column in columns:
        if isinstance(column, list | tuple):
            flat.extend(column)
        else:
            flat.append(column)
    return flat


# --- deduplication --------------------------------------------------------------------------

def plan_deduplication(source: StepInput, subset: Sequence[str] | None,
                       within_watermark: bool, label: str) -> ChainLink:
    """`dropDuplicates(subset)` / `dropDuplicatesWithinWatermark(subset)` after the first
    stateful step (no subset: every column)."""
    template = source.template
    columns = list(template.columns) if not subset else list(_flat(list(subset)))
    for column in columns:
        if not isinstance(column, str):
            raise ChainedStepError(f"{label}: give column names, got {column!r}")
    output = (template.dropDuplicatesWithinWatermark(columns) if within_watermark
              else template.dropDuplicates(columns))  # Spark resolves the names here
    event_time = event_time_column(template.schema)
    if within_watermark and event_time is None:
        raise ChainedStepError(
            f"{label}: dropDuplicatesWithinWatermark needs a watermark on its input, and no "
            f"column of the previous step's output carries one: name the output's event-time "
            f"column with eventTimeColumnName=... on the stateful step before it (its input "
            f"needs df.withWatermark(...))")
    delay = watermark_delay_ms(template.schema, event_time) if event_time else 0
    plan = DedupPlan(tuple(columns), tuple(template.columns), event_time, within_watermark,
                     delay, label)
    kind = DEDUPLICATE_WITHIN_WATERMARK if within_watermark else DEDUPLICATE
    return ChainLink(
        kind=kind, label=label, processor=DeduplicationProcessor(plan),
        key_columns=tuple(columns), output_schema=template.schema, template=output,
        prepare=source.before,
        time_mode=EVENT_TIME if event_time is not None else NO_TIME_MODE,
        late_column=event_time,
        record={"state": {"kind": kind, "keys": columns, "event_time": event_time,
                          "delay_ms": delay}})


# --- a second transformWithState ----------------------------------------------------------

def plan_transform_step(source: StepInput, key_columns: tuple[str, ...], rows_as: str,
                        arguments: Mapping[str, Any], label: str) -> ChainLink:
    """`groupBy(...).transformWithStateInPandas(...)` / `.transformWithState(...)` after the
    first stateful step: the same machinery as the first one."""
    from pyspark_dstl.spark.pyspark_api.transform import plan_transform

    template = source.template
    if arguments.get("initialState") is not None:
        raise ChainedStepError(
            f"{label}: initialState is not supported on a transformWithState after another "
            f"stateful step on this backend; give the initial state to the first stateful "
            f"step, or start this step in its own query")
    plan = plan_transform(template, key_columns, arguments["statefulProcessor"],
                          arguments["outputStructType"], arguments["outputMode"],
                          arguments["timeMode"], None, arguments["eventTimeColumnName"],
                          rows_as)
    incoming = event_time_column(template.schema)
    named = arguments.get("eventTimeColumnName") or None
    delay = watermark_delay_ms(template.schema, incoming) if incoming else None
    output = with_event_time(template.sparkSession, plan.output_schema, named, delay)
    return ChainLink(
        kind=TRANSFORM, label=label, processor=plan.processor, key_columns=key_columns,
        output_schema=plan.output_schema, template=output, prepare=source.before,
        time_mode=plan.time_mode,
        late_column=incoming if plan.time_mode == EVENT_TIME else None,
        emits_event_time=named, swallows_watermark=plan.time_mode == PROCESSING_TIME,
        record={"state": {"kind": TRANSFORM, "processor": type(plan.processor.processor)
                          .__name__, "time_mode": plan.time_mode}})


# --- the query's output mode --------------------------------------------------------------

def for_output_mode(links: Sequence[ChainLink], mode: str, entry: str) -> tuple[ChainLink, ...]:
    """The links as they run in a query of output mode `mode`, after Spark's checks."""
    mode = mode.lower()
    if mode not in QUERY_OUTPUT_MODES:
        raise ChainedStepError(f"outputMode({mode!r}): use 'append', 'update' or 'complete'")
    aggregations = [link for link in links if link.is_aggregation]
    if mode == COMPLETE and not aggregations:
        raise ChainedStepError(
            f"outputMode('complete'): Complete output mode not supported when there are no "
            f"streaming aggregations on streaming DataFrames/Datasets ({entry} emits what its "
            f"processor yields); use outputMode('append') or outputMode('update')")
    configured = []
    for position, link in enumerate(links):
        later = links[position + 1:]
        if link.is_aggregation and mode != APPEND and later:
            raise ChainedStepError(
                f"{later[0].label} after {link.label} in outputMode({mode!r}): in update and "
                f"complete mode an aggregation re-emits rows as they change, which a stateful "
                f"step after it would take as late rows (Spark refuses this chain too, "
                f"spark.sql.streaming.statefulOperator.checkCorrectness); use "
                f"outputMode('append')")
        configured.append(_configured(link, mode))
    return tuple(configured)


def _configured(link: ChainLink, mode: str) -> ChainLink:
    if not link.is_aggregation:
        return link
    processor = link.processor
    plan: AggregationPlan = processor.plan
    if link.kind == SESSION_AGGREGATE and mode == UPDATE:
        raise ChainedStepError(
            f"{link.label} in outputMode('update'): Invalid streaming output mode: update. "
            f"This output mode is not supported for session window streaming aggregations "
            f"on streaming DataFrames/DataSets (in Spark either); use outputMode('append')")
    if mode == APPEND and plan.event_time_column is None:
        raise ChainedStepError(
            f"{link.label} in outputMode('append'): Invalid streaming output mode: append. "
            f"This output mode is not supported for streaming aggregations without watermark "
            f"on streaming DataFrames/DataSets: group by a window(...) of the event-time "
            f"column (the column eventTimeColumnName names), or by that column, or use "
            f"outputMode('update') or outputMode('complete')")
    configured = dataclasses.replace(plan, mode=mode)
    if link.kind == SESSION_AGGREGATE:
        new: Any = SessionAggregationProcessor(configured, processor.session)
    else:
        new = AggregationProcessor(configured)
    late = link.late_column if mode != COMPLETE else None
    return dataclasses.replace(link, processor=new, late_column=late)
