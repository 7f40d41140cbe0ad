"""Import of the steps a Spark query chains after its transformWithState: each chained
operator's state, read through Spark's own `statestore` source, written in the encoding this
backend's step of the same kind keeps (spark/chain/), so the chained query goes on here with
exactly the state Spark's operators held after batch N.

Spark numbers a query's stateful operators from the sink back: the operator nearest to the
sink is 0 and the first step (the transformWithState) has the highest id, so the chained
steps in query order are the other operators by falling id. They are paired with the steps of
the query as written (its `ChainLink`s, planned for its output mode) and must agree in number
and kind, or nothing is written.

What each kind brings (Spark's state at batch N, one row per key):
- an aggregation (Spark's `stateStoreSave`): the grouping key (a window as its start and end)
  and the aggregation buffer, field by field in the order of the aggregates: count, sum and
  avg of non-decimal numbers, min, max, first and last have the same buffers here, and keep
  them; the eviction timer at the key's event time, as the step registers it for a new key;
- `dropDuplicates` (`dedupe`): the seen keys, with the eviction timer at the key's event time
  when the key holds it; `dropDuplicatesWithinWatermark` (`dedupeWithinWatermark`): the seen
  keys with Spark's `expiresAtMicros`, kept as the step's value, and the timer at that time;
- a second transformWithState: its variables and timers, as the first step's (importer.py).

Refused by name (the operator id, its kind, why, what to do), never approximated: session
windows (Spark keeps a key's sessions in its own layout), collect_list (its buffer is Spark's
serialized array), decimal sum and avg (Spark keeps an extra `isEmpty` flag and its own
overflow rules), approx_count_distinct and anything else with a buffer this backend does not
keep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pyspark_dstl.spark.chain.aggregation import (
    COMPLETE,
    AggregationPlan,
    BufferCodec,
    expiries_ms,
)
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
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.moves.spark_checkpoint import ChainImportError, SparkCheckpoint
from pyspark_dstl.spark.processors.processor import (
    Output,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.readers.routing import sparks_own_state_reads

SPARK_KINDS = {
    "statestoresave": AGGREGATE,
    "sessionwindowstatestoresaveexec": SESSION_AGGREGATE,
    "dedupe": DEDUPLICATE,
    "dedupewithinwatermark": DEDUPLICATE_WITHIN_WATERMARK,
}
KIND_WORDS = {
    AGGREGATE: "an aggregation", SESSION_AGGREGATE: "a session window aggregation",
    DEDUPLICATE: "dropDuplicates", DEDUPLICATE_WITHIN_WATERMARK: "dropDuplicatesWithinWatermark",
    TRANSFORM: "a transformWithState",
}
# aggregate functions whose Spark buffer is this backend's, field by field
SAME_BUFFERS = ("count", "sum", "avg", "min", "max", "first", "last")
EXPIRES = "__dstl_import_expires"  # dropDuplicatesWithinWatermark's expiresAtMicros


def buffer_column(index: int) -> str:
    return f"__dstl_import_buffer_{index}"


@dataclass(frozen=True)
class SparkStep:
    """One stateful operator of the Spark checkpoint, as its metadata lists it."""

    operator_id: int
    name: str  # Spark's operator name (stateStoreSave, dedupe, ...)
    row: Any  # the state-metadata row

    @property
    def kind(self) -> str | None:
        if "transformwithstate" in self.name.lower():
            return TRANSFORM
        return SPARK_KINDS.get(self.name.lower())

    def describe(self) -> str:
        return f"operator {self.operator_id}: {self.name}"


@dataclass(frozen=True)
class ChainedImport:
    """What one chained operator's import runs: the link its stage runs (the query's link
    with an importing processor) and the records it reads (a lazy DataFrame)."""

    position: int
    step: SparkStep
    link: ChainLink
    records: Any

    def describe(self) -> str:
        return (f"Spark's {self.step.describe()} as step {self.position} "
                f"({self.link.label})")


def in_query_order(rows: Sequence[Any]) -> list[SparkStep]:
    """Spark's operators of a query, the first step first (falling operator ids)."""
    steps = {int(row["operatorId"]): SparkStep(int(row["operatorId"]), str(row["operatorName"]),
                                               row) for row in rows}
    return [steps[number] for number in sorted(steps, reverse=True)]


def plan_chain_import(spark: Any, checkpoint: SparkCheckpoint, batch_id: int,
                      steps: Sequence[SparkStep], links: Sequence[ChainLink],
                      transform_import: Callable[[SparkStep, ChainLink], tuple[Any, Any]]
                      ) -> tuple[ChainedImport, ...]:
    """Pair Spark's chained operators with the query's chained steps and plan each import;
    everything is checked before anything is written. `transform_import`: (records, importing
    processor) of a chained transformWithState (importer.py does those)."""
    where = f"Spark checkpoint {str(checkpoint.root)!r}"
    if len(steps) != len(links):
        raise ChainImportError(
            f"{where} chains {len(steps)} stateful operator(s) after its transformWithState ("
            + (", ".join(step.describe() for step in steps) or "none")
            + f") but the query given chains {len(links)} ("
            + (", ".join(link.label for link in links) or "none")
            + "): give the chained query the Spark checkpoint was written by")
    planned = []
    for position, (step, link) in enumerate(zip(steps, links, strict=True), start=1):
        kind = step.kind
        if kind != link.kind:
            raise ChainImportError(
                f"{where}, {step.describe()}: Spark ran {KIND_WORDS.get(kind or '', step.name)} "
                f"there, but step {position} of the query is {link.label} "
                f"({KIND_WORDS[link.kind]}): give the chained query the Spark checkpoint was "
                f"written by")
        read = _reader(spark, checkpoint, batch_id, step.operator_id)
        if kind == AGGREGATE:
            records, processor = _aggregation(where, step, link, read)
        elif kind in (DEDUPLICATE, DEDUPLICATE_WITHIN_WATERMARK):
            records, processor = _deduplication(where, step, link, read)
        elif kind == TRANSFORM:
            records, processor = transform_import(step, link)
        else:
            raise ChainImportError(
                f"{where}, {step.describe()} ({link.label}): the state of "
                f"{KIND_WORDS.get(kind or '', step.name)} cannot be imported exactly: Spark keeps "
                f"a key's sessions in a layout of its own that this backend does not convert; "
                f"keep the query on PySpark's operators, or start the chained query on this "
                f"backend from its input")
        importing = dataclasses.replace(link, processor=processor, prepare=_same,
                                        late_column=None, emits_event_time=None)
        planned.append(ChainedImport(position, step, importing, records))
    return tuple(planned)


def _same(frame: Any) -> Any:
    return frame


def _reader(spark: Any, checkpoint: SparkCheckpoint, batch_id: int,
            operator_id: int) -> Callable[..., Any]:
    def read(**options: str) -> Any:
        reading = (spark.read.format("statestore").option("batchId", batch_id)
                   .option("operatorId", operator_id))
        for key, value in options.items():
            reading = reading.option(key, value)
        with sparks_own_state_reads():
            return reading.load(str(checkpoint.root))
    return read


# ---- aggregations ----------------------------------------------------------------------------


def _aggregation(where: str, step: SparkStep, link: ChainLink,
                 read: Callable[..., Any]) -> tuple[Any, VectorizedStatefulProcessor]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, StructField, StructType

    plan: AggregationPlan = link.processor.plan
    culprit = f"{where}, {step.describe()} ({link.label})"
    for spec in plan.aggregates:
        decimal = pa.types.is_decimal(spec.result_type) or (
            spec.sum_type is not None and pa.types.is_decimal(spec.sum_type))
        if spec.function not in SAME_BUFFERS or (spec.function in ("sum", "avg") and decimal):
            what = ("a decimal " + spec.function if decimal and spec.function in SAME_BUFFERS
                    else spec.function)
            raise ChainImportError(
                f"{culprit}: the aggregate {spec.output!r} ({what}) cannot be imported exactly: "
                f"Spark's buffer for it is not the one this backend keeps"
                f"{' (a serialized array)' if spec.function == 'collect_list' else ''}; keep "
                f"the query on PySpark's operators, or start the chained query on this backend "
                f"from its input")
    frame = read()
    key_fields = list(frame.schema["key"].dataType.fields)
    value_fields = list(frame.schema["value"].dataType.fields)
    named = [part for part in plan.keys if part.output is not None]
    width = len(plan.buffer_types)
    if len(key_fields) != len(named) or len(value_fields) != width or any(
            isinstance(f.dataType, DecimalType) for f in value_fields):
        raise ChainImportError(
            f"{culprit}: Spark's state holds key ({', '.join(f.name for f in key_fields)}) "
            f"and buffer ({', '.join(f.name for f in value_fields)}), not the "
            f"{len(named)} grouping column(s) and {width} buffer field(s) of this step: give "
            f"the chained query the Spark checkpoint was written by")
    columns: list[Any] = []
    for part, field in zip(named, key_fields, strict=True):
        column = F.col("key").getField(field.name)
        if part.window:
            columns += [column.getField("start").alias(part.columns[0]),
                        column.getField("end").alias(part.columns[1])]
        else:
            columns.append(column.alias(part.columns[0]))
    if not named:  # a global aggregation: the hidden constant key
        columns.append(F.lit(0).alias(plan.keys[0].columns[0]))
    # the buffer's fields by position: two aggregates may share a field name (sum, sum), and
    # a struct cast renames fields by position where a read by name would pick one of them
    renamed = StructType([StructField(buffer_column(i), field.dataType)
                          for i, field in enumerate(value_fields)])
    buffers = F.col("value").cast(renamed)
    records = frame.select(*columns, *(buffers.getField(buffer_column(i)).alias(
        buffer_column(i)) for i in range(width)))
    return records, AggregationImporter(plan)


class AggregationImporter(VectorizedStatefulProcessor):
    """Writes each imported key's buffers as the aggregation step stores them, and the
    eviction timer the step registers for a new key."""

    def __init__(self, plan: AggregationPlan) -> None:
        self.plan = plan
        self.display_name = f"import-state({plan.label})"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.declare_state("value", AGGREGATE_STATE, None)
        self._codec = BufferCodec(self.plan)

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        if not len(batch):
            return
        rows = batch.table.take(pa.array(batch.offsets[:-1], pa.int64()))
        buffers = [rows.column(buffer_column(i)).combine_chunks().cast(kind)
                   for i, kind in enumerate(self._codec.types)]
        self._state.update_many(batch.keys, self._codec.encode(buffers))
        column = self.plan.event_time_column
        if column is not None and self.plan.mode != COMPLETE:
            times = batch.key_table.column(column).combine_chunks()
            with_time, expiries = expiries_ms(times)
            if len(with_time):
                self._handle.register_timers(batch.keys.take(with_time), expiries.tolist(),
                                             allow_due=True)
        yield from ()


# ---- deduplication ---------------------------------------------------------------------------


def _deduplication(where: str, step: SparkStep, link: ChainLink, read: Callable[..., Any]
                   ) -> tuple[Any, VectorizedStatefulProcessor]:
    from pyspark.sql import functions as F

    plan: DedupPlan = link.processor.plan
    frame = read()
    keys = tuple(frame.schema["key"].dataType.names)
    if keys != plan.key_columns:
        raise ChainImportError(
            f"{where}, {step.describe()} ({link.label}): Spark's state holds the keys "
            f"({', '.join(keys)}), this step deduplicates on ({', '.join(plan.key_columns)}): "
            f"give the chained query the Spark checkpoint was written by")
    columns = [F.col("key").getField(name).alias(name) for name in plan.key_columns]
    if plan.within_watermark:
        columns.append(F.col("value").getField("expiresAtMicros").alias(EXPIRES))
    return frame.select(*columns), DedupImporter(plan)


class DedupImporter(VectorizedStatefulProcessor):
    """Writes each imported seen key as the deduplication step stores it (its expiry in
    microseconds within the watermark, else 0), with the step's eviction timer."""

    def __init__(self, plan: DedupPlan) -> None:
        self.plan = plan
        self.display_name = f"import-state({plan.label})"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.declare_state("value", DEDUP_STATE, None)

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        if not len(batch):
            return
        plan = self.plan
        rows = batch.table.take(pa.array(batch.offsets[:-1], pa.int64()))
        values = [0] * len(batch)
        if plan.within_watermark:
            ends = rows.column(EXPIRES).combine_chunks()
            valid = np.flatnonzero(np.asarray(ends.is_valid().to_numpy(zero_copy_only=False),
                                              dtype=bool))
            micros = np.asarray(ends.fill_null(0).to_numpy(zero_copy_only=False),
                                dtype=np.int64)
            for index in valid.tolist():
                values[index] = int(micros[index])
            timers = valid, -(-micros[valid] // 1000)
        elif plan.evicts:
            assert plan.event_time_column is not None
            timers = expiries_ms(batch.key_table.column(plan.event_time_column)
                                 .combine_chunks())
        else:
            timers = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        self._state.update_many(batch.keys, values)
        if len(timers[0]):
            self._handle.register_timers(batch.keys.take(timers[0]), timers[1].tolist(),
                                         allow_due=True)
        yield from ()
