"""The stateful task: what every partition runs inside mapInArrow on an executor.

It loads the partition's store at the committed checkpoint shipped in the plan, runs the
processor, commits, closes the processor, and returns its output rows followed by one row that
carries its TaskReport (stage/report.py: the new StoreCommit and what the task did) in the
meta column. With outputMode "files" it writes output rows larger than `inline_bytes` to one
file after the commit and returns the meta row alone, naming that file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.processors import initial_state
from pyspark_dstl.spark.processors.processor import AnyProcessor
from pyspark_dstl.spark.spark_errors import LateOutputRowError, PartitioningError
from pyspark_dstl.spark.stage.failures import task_failure
from pyspark_dstl.spark.stage.open_stores import executor_stores
from pyspark_dstl.spark.stage.output_files import (
    OutputPart,
    inline_part,
    output_storage,
    part_path,
    write_part,
)
from pyspark_dstl.spark.stage.report import TaskReport
from pyspark_dstl.spark.stage.runner import BatchTimes, run_processor
from pyspark_dstl.spark.stage.upload_stats import upload_delta
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects
from pyspark_dstl.spark.time.modes import NO_TIME
from pyspark_dstl.spark.time.watermark import (
    drop_late_rows,
    late_emitted_rows,
    max_event_time_ms,
)

META_COLUMN = "__dstl_meta"
PARTITION_COLUMN = "__dstl_partition"


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, as plain data (it travels inside the task closure)."""

    location: str  # the checkpoint location's URL
    operator: str
    num_partitions: int
    batch_id: int
    now_ms: int
    key_columns: tuple[str, ...]
    settings: Mapping[str, str]
    input_schema: pa.Schema
    output_schema: pa.Schema
    bases: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    time_mode: str = "none"
    watermark_ms: int = NO_TIME  # timers fire at or before it (event time)
    event_time_column: str | None = None
    late_threshold_ms: int | None = None  # rows at or before it are late and dropped
    output_files: bool = False  # outputMode "files": write the output, return the meta only
    inline_bytes: int = 0  # outputMode "files": a smaller output comes with the meta row
    key_types: tuple[str, ...] = ()  # the key columns' Spark types (simpleString)
    key_groups: int = KEY_GROUPS  # G: keys are stored behind pmod(hash(keys), G)
    # transformWithState's eventTimeColumnName: every emitted row's time must be later than
    # `output_late_ms` (the previous batch's watermark)
    output_event_time: str | None = None
    output_late_ms: int | None = None

    @property
    def grouping(self) -> KeyGrouping:
        """Key groups of keys a processor passes itself (Spark computed the batch's)."""
        return KeyGrouping(tuple(self.key_types), self.key_groups)

    @property
    def times(self) -> BatchTimes:
        return BatchTimes(self.now_ms, self.watermark_ms, self.time_mode)

    @property
    def result_schema(self) -> pa.Schema:
        """The output schema, all nullable, plus the meta column."""
        fields = [f.with_nullable(True) for f in self.output_schema]
        return pa.schema([*fields, pa.field(META_COLUMN, pa.string())])


def stateful_task(plan: TaskPlan, processor: AnyProcessor,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task; a failure leaves it as a StatefulTaskError naming its culprit first."""
    try:
        yield from _run_task(plan, processor, batches)
    except Exception as exc:
        raise task_failure(exc, processor, plan.batch_id, _partition_id()) from None


def _partition_id() -> int | None:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else None


def _run_task(plan: TaskPlan, processor: AnyProcessor,
              batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext  # executor-only import: the plan module stays light

    context = TaskContext.get()
    if context is None:
        raise PartitioningError("the stateful task must run inside a Spark task")
    partition, attempt = context.partitionId(), context.attemptNumber()
    freeze_imported_objects()  # before the clock: not a cost of this task's state
    clock = _Stopwatch()
    rows = _TaskInput.read(plan, partition, batches)
    clock.mark("read")
    run = _process_and_commit(plan, processor, partition, rows, clock)
    written = _write_output(plan, processor, partition, run)
    processor.close()  # after the commit: a failure here is a failure after committing
    report = TaskReport(
        partition=partition, attempt=attempt, info=run.info,
        input_rows=rows.table.num_rows + rows.late_rows, late_rows=rows.late_rows,
        initial_state_rows=0 if rows.initial is None else rows.initial.num_rows,
        keys=run.keys, timers_fired=run.timers_fired, next_timer_ms=run.next_timer_ms,
        max_event_time_ms=rows.newest_event_ms, output_rows=run.output.num_rows,
        input_seconds=clock.between("started", "read"),
        load_seconds=clock.between("read", "loaded"),
        process_seconds=clock.between("loaded", "processed"),
        commit_seconds=clock.between("processed", "committed"),
        task_seconds=clock.since("started"), store=run.store_metrics, upload=run.uploads,
        output=written)
    yield from _result_batches(plan, run.output, written, report)


class _Stopwatch:
    """Named instants of one task, for the report's durations."""

    def __init__(self) -> None:
        self._marks = {"started": time.monotonic()}

    def mark(self, name: str) -> None:
        self._marks[name] = time.monotonic()

    def between(self, first: str, second: str) -> float:
        return self._marks[second] - self._marks[first]

    def since(self, name: str) -> float:
        return time.monotonic() - self._marks[name]


@dataclass(frozen=True)
class _TaskInput:
    """The partition's rows after its ownership check, initial state split off and late rows
    dropped."""

    table: pa.Table
    initial: pa.Table | None
    newest_event_ms: int | None
    late_rows: int

    @classmethod
    def read(cls, plan: TaskPlan, partition: int,
             batches: Iterator[pa.RecordBatch]) -> _TaskInput:
        table, initial = initial_state.split(_own_rows(plan, partition, batches),
                                             plan.key_columns)
        newest_event_ms, late_rows = None, 0
        if plan.event_time_column is not None:
            newest_event_ms = max_event_time_ms(table, plan.event_time_column)
            if plan.late_threshold_ms is not None:
                table, late_rows = drop_late_rows(table, plan.event_time_column,
                                                  plan.late_threshold_ms)
        return cls(table, initial, newest_event_ms, late_rows)


@dataclass(frozen=True)
class _Run:
    """The processor's run over the batch and the store's commit."""

    info: StoreCommit
    output: pa.Table
    keys: int
    timers_fired: int
    next_timer_ms: int | None
    store_metrics: dict[str, Any]
    uploads: dict[str, Any]


def _process_and_commit(plan: TaskPlan, processor: AnyProcessor, partition: int,
                        rows: _TaskInput, clock: _Stopwatch) -> _Run:
    """Load the store at the committed checkpoint, run the processor, commit the store."""
    base = plan.bases.get(partition)
    base_info = StoreCommit.from_dict(base) if base is not None else None
    with executor_stores().provider(plan.settings, plan.location, plan.operator,
                                partition) as provider:
        store = (provider.get_store(base_info.version, base_info) if base_info is not None
                 else provider.get_store(0))
        clock.mark("loaded")
        try:
            result = run_processor(
                processor, store, rows.table, plan.key_columns, plan.output_schema,
                batch_id=plan.batch_id, partition_id=partition, times=plan.times,
                initial_state=rows.initial, grouping=plan.grouping)
            clock.mark("processed")
            _check_emitted_times(plan, processor, result.output)
            info = store.commit()
        except BaseException as exc:
            store.abort()
            _close_after_failure(processor, exc)
            raise
        clock.mark("committed")
        metrics = dict(store.metrics())
        uploads = upload_delta(executor_stores().backend(plan.settings)
                               .context(plan.location).storage)
    return _Run(info, result.output, result.keys, result.timers_fired, result.next_timer_ms,
                metrics, uploads)


def _check_emitted_times(plan: TaskPlan, processor: AnyProcessor, output: pa.Table) -> None:
    """Spark's rule for a step that names its event-time column: no emitted row may be at or
    before the watermark for late events, which the steps after it filter with."""
    if plan.output_event_time is None or plan.output_late_ms is None:
        return
    count, oldest = late_emitted_rows(output, plan.output_event_time, plan.output_late_ms)
    if count:
        name = getattr(processor, "display_name", type(processor).__name__)
        raise LateOutputRowError(
            f"{name} emitted {count} row(s) whose event time ({plan.output_event_time!r}, "
            f"eventTimeColumnName) is at or before the watermark for late events, "
            f"{plan.output_late_ms} ms; the oldest is {oldest} us "
            f"(EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED in Spark): emit event times "
            f"after the previous batch's watermark, e.g. from the input rows or a timer's "
            f"expiry, or leave eventTimeColumnName out when no step after it uses event time")


def _write_output(plan: TaskPlan, processor: AnyProcessor, partition: int,
                  run: _Run) -> OutputPart | None:
    """outputMode "files": the output as a file named after the commit, or inline when small
    (after the commit, so output uploads never count as the state's)."""
    if not plan.output_files:
        return None
    if run.output.nbytes <= plan.inline_bytes:
        return inline_part(partition, run.output)
    try:
        return write_part(output_storage(plan.location, plan.settings),
                          part_path(plan.operator, plan.batch_id, partition,
                                    run.info.unique_id), partition, run.output)
    except BaseException as exc:
        _close_after_failure(processor, exc)
        raise


def _result_batches(plan: TaskPlan, output: pa.Table, written: OutputPart | None,
                    report: TaskReport) -> Iterator[pa.RecordBatch]:
    """The output rows (unless written to a file), then the meta row with the report."""
    schema = plan.result_schema
    if written is None or written.inline:
        for batch in output.to_batches():
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.nulls(batch.num_rows, pa.string())], schema=schema)
    yield pa.RecordBatch.from_arrays(
        [pa.nulls(1, f.type) for f in plan.output_schema]
        + [pa.array([report.to_json()], pa.string())], schema=schema)


def _own_rows(plan: TaskPlan, partition: int, batches: Iterator[pa.RecordBatch]) -> pa.Table:
    """The task's rows without the partition column, after checking it owns every key (the
    key group column stays for KeyedBatch, which drops it before user code sees rows)."""
    table = pa.Table.from_batches(list(batches), schema=plan.input_schema)
    if table.num_rows:
        column = table.column(PARTITION_COLUMN)
        wrong = pc.sum(pc.not_equal(column, pa.scalar(partition, column.type))).as_py()
        if wrong:
            raise PartitioningError(
                f"task of state partition {partition} received {wrong} row(s) hashed to "
                f"another partition (was the stage repartitioned or coalesced, e.g. by "
                f"adaptive execution?)")
    return table.drop_columns([PARTITION_COLUMN])


def _close_after_failure(processor: AnyProcessor, error: BaseException) -> None:
    """close() even after a failure; its own error becomes a note on the first one."""
    try:
        processor.close()
    except Exception as exc:
        error.add_note(f"{type(processor).__name__}.close() also failed: {exc!r}")
