"""One stateful stage of a batch on the driver: route the rows, run the tasks in one action,
read their reports back, and hand the output on.

Every operator of a query, the first stateful step and each step chained after it, runs its
stage through here, so all of them load, commit and report the same way; what differs (the
processor, its keys, its clocks) is in the `TaskPlan` each one builds.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.spark.keys.key_grouping import GROUP_COLUMN, routing_longs
from pyspark_dstl.spark.processors.processor import AnyProcessor
from pyspark_dstl.spark.session import is_connect, session_settings
from pyspark_dstl.spark.spark_errors import CommitValidationError
from pyspark_dstl.spark.stage.failures import stage_errors
from pyspark_dstl.spark.stage.output_files import StagedOutput, driver_arrow_frame
from pyspark_dstl.spark.stage.partition import (
    META_COLUMN,
    PARTITION_COLUMN,
    TaskPlan,
    stateful_task,
)
from pyspark_dstl.spark.stage.report import TaskReport
from pyspark_dstl.spark.stage.worker_heap import freeze_imported_objects
from pyspark_dstl.spark.time.clock import BatchClock

ADAPTIVE_EXECUTION = "spark.sql.adaptive.enabled"


@contextlib.contextmanager
def without_adaptive_execution(spark: Any) -> Iterator[None]:
    """Run the stage's action with adaptive execution off, then put the setting back.

    The stage's plan has nothing to adapt (exactly n state partitions, one task each), and
    adaptive execution would run its shuffle and its Python tasks as two Spark jobs instead of
    one job of two stages: a job's scheduling costs tens of milliseconds in every batch. Spark
    plans its own stateful operators without it as well."""
    if str(spark.conf.get(ADAPTIVE_EXECUTION)).lower() == "false":
        yield
        return
    with session_settings(spark, {ADAPTIVE_EXECUTION: "false"}):
        yield


@dataclass(frozen=True)
class BatchBase:
    """The committed state a batch builds on: the newest entry of an earlier batch.
    `rerun`: the batch itself is already committed (the engine runs it again)."""

    batch_id: int | None
    entry: CommitEntry | None
    rerun: bool = False
    rescale: Mapping[str, Any] | None = None  # this run rescaled `entry` (not yet committed)

    def infos(self, operator: str) -> dict[int, StoreCommit]:
        if self.entry is None or operator not in self.entry.operators:
            return {}
        return dict(self.entry.operators[operator].stores)


@dataclass
class StageResult:
    """One run of a stateful stage: its output and one task report per partition."""

    batch_id: int
    base: BatchBase
    num_partitions: int
    output: pa.Table | None  # outputMode "collect": the output rows on the driver
    reports: dict[int, TaskReport]
    seconds: float
    cached: Any = None  # outputMode "cache": the persisted stage result (with meta rows)
    clock: BatchClock | None = None
    staged: StagedOutput | None = None  # outputMode "files": the committed attempts' files
    driver_bytes: int = 0  # Arrow bytes the stage's action brought to the driver
    key_types: list[str] = field(default_factory=list)
    key_groups: int = KEY_GROUPS  # G of the batch's stored keys (its layout)
    operator: str = ""  # the operator whose stage this was
    output_schema: Any = None  # its output's StructType

    @property
    def infos(self) -> dict[int, StoreCommit]:
        """The new checkpoint of every partition."""
        return {partition: report.info for partition, report in self.reports.items()}

    @property
    def stats(self) -> dict[int, dict[str, Any]]:
        """Every report as the flat statistics the batch's metrics fold."""
        return {partition: report.measures() for partition, report in self.reports.items()}

    @property
    def output_rows(self) -> int:
        return sum(report.output_rows for report in self.reports.values())

    def release(self) -> None:
        """Drop the cached stage result (outputMode "cache"); a no-op otherwise."""
        if self.cached is not None:
            self.cached.unpersist()
            self.cached = None


def run_stage(keyed: Any, plan: TaskPlan, processor: AnyProcessor, output_schema: Any,
              output_mode: str, batch_id: int, base: BatchBase, clock: BatchClock,
              key_types: list[str], started: float) -> StageResult:
    """The stage of one operator over `keyed` (rows routed by `routed`), run once."""
    task = functools.partial(stateful_task, plan, processor)
    stage = _run_stage(keyed.mapInArrow(task, result_struct(output_schema)), output_mode)
    reports = _reports_of(stage.metas, batch_id)
    output, staged = stage.output, None
    if plan.output_files and output is not None:
        parts = tuple(r.output for _, r in sorted(reports.items()) if r.output is not None)
        staged = StagedOutput(plan.location, plan.settings, plan.output_schema, parts, output)
        output = None
    return StageResult(batch_id, base, plan.num_partitions, output, reports,
                       time.monotonic() - started, stage.cached, clock, staged,
                       stage.driver_bytes, key_types, plan.key_groups, plan.operator,
                       output_schema)


def validate_stage(result: StageResult) -> None:
    """Every partition committed exactly once, on top of the previous commit."""
    previous = result.base.infos(result.operator)
    missing = sorted(set(range(result.num_partitions)) - set(result.infos))
    what = f"batch {result.batch_id}, operator {result.operator!r}"
    if missing:
        raise CommitValidationError(f"{what}: no checkpoint from state partition(s) {missing}")
    if result.staged is not None:
        written = {part.partition for part in result.staged.parts}
        unnamed = sorted(set(result.infos) - written)
        if unnamed:
            raise CommitValidationError(f"{what}: state partition(s) {unnamed} named no "
                                        f"output file")
        if result.staged.inline.num_rows != result.staged.inline_rows:
            raise CommitValidationError(
                f"{what}: {result.staged.inline.num_rows} output rows came with the meta "
                f"rows, the tasks reported {result.staged.inline_rows}")
    for partition, info in sorted(result.infos.items()):
        before = previous.get(partition)
        expected = (before.version + 1, before.unique_id) if before else (1, None)
        if (info.version, info.base_unique_id) != expected:
            raise CommitValidationError(
                f"{what}: store {info.store_id!r} committed version {info.version} on base id "
                f"{info.base_unique_id!r}, expected version {expected[0]} on base id "
                f"{expected[1]!r} (the committed checkpoint of batch {result.base.batch_id})")


def stage_output_frame(spark: Any, result: StageResult) -> Any:
    """A stage's output as a DataFrame: read from the committed attempts' files, from the
    collected Arrow data, or the cached stage result without its meta rows."""
    if result.staged is not None:
        return result.staged.frame(spark, result.output_schema)
    if result.cached is not None:
        return result.cached.where(result.cached[META_COLUMN].isNull()).drop(META_COLUMN)
    if result.output is None:
        raise CommitValidationError(f"batch {result.batch_id}: the output of operator "
                                    f"{result.operator!r} was already released")
    return driver_arrow_frame(spark, result.output, result.output_schema)


@dataclass
class _Stage:
    """What the stage's one action brought back: the meta rows' reports (JSON), and the
    output as Arrow on the driver ("collect", "files") or the persisted result ("cache")."""

    metas: list[str]
    output: pa.Table | None = None
    cached: Any = None
    driver_bytes: int = 0


def routed(source: Any, key_columns: tuple[str, ...], n: int, key_groups: int) -> Any:
    """`source` with each row's key group (GROUP_COLUMN, pmod(hash(keys), G)) and state
    partition (PARTITION_COLUMN, the group's owner: group * n div G), repartitioned so that
    every row lands in exactly that partition: repartition(n, e) sends a row to
    pmod(hash(e), n), so e is a long chosen per partition to hash there (routing_longs)."""
    group, partition, route = _routing(tuple(key_columns), n, key_groups,
                                       getattr(source.sparkSession, "_sc", None))
    return (source.withColumns({GROUP_COLUMN: group, PARTITION_COLUMN: partition})
            .repartition(n, route))


@functools.lru_cache(maxsize=32)
def _routing(key_columns: tuple[str, ...], n: int, key_groups: int,
             context: Any) -> tuple[Any, Any, Any]:
    """The routing expressions, built once per (keys, n, G) and Spark context (`context`:
    None on Spark Connect, whose columns hold no JVM object): each function call below is a
    round trip to the JVM, about 15 per batch otherwise."""
    from pyspark.sql import functions as F

    group = F.pmod(F.hash(*[F.col(name) for name in key_columns]), F.lit(key_groups))
    partition = F.expr(f"CAST((`{GROUP_COLUMN}` * {n}) div {key_groups} AS INT)")
    routes = ", ".join(f"CAST({value} AS BIGINT)" for value in routing_longs(n))
    route = F.expr(f"element_at(array({routes}), `{PARTITION_COLUMN}` + 1)")
    return group, partition, route


def never_pruned(frame: Any) -> Any:
    """`frame` as a plan Spark cannot prove empty. A chained stage reads the previous stage's
    output, a local relation when that output is empty, and Spark's optimizer replaces
    operators over an empty local relation with an empty result (PropagateEmptyRelation): the
    stage's tasks would never run, and a batch without rows must still commit every state
    partition (and evict by the watermark). Such a frame gets one more source that yields
    nothing; any other frame is returned as it is, since that source is a Python task of its
    own in every batch."""
    if not provably_empty(frame):
        return frame
    spark = frame.sparkSession
    nothing = spark.range(0, 1, 1, 1).mapInArrow(_no_rows, frame.schema)
    return frame.unionByName(nothing)


def provably_empty(frame: Any) -> bool:
    """Whether Spark's optimizer reduces `frame` to no rows (an empty local relation, or a
    plan of at most 0 rows). On Spark Connect, whose frames hold no JVM plan to ask, every
    frame counts as empty."""
    if is_connect(frame.sparkSession):
        return True
    plan = frame._jdf.queryExecution().optimizedPlan()
    most = plan.maxRows()
    if most.isDefined() and most.get() == 0:
        return True
    return bool(plan.getClass().getSimpleName() == "LocalRelation" and plan.data().isEmpty())


def _no_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    freeze_imported_objects()
    for _ in batches:
        pass
    return iter(())


def _run_stage(mapped: Any, mode: str) -> _Stage:
    """The stage's one action (so no later action can recompute it and commit again)."""
    from pyspark.sql import functions as F

    spark = mapped.sparkSession
    if mode in ("collect", "files"):
        with stage_errors(), without_adaptive_execution(spark):
            table = mapped.toArrow()
        meta_mask = pc.is_valid(table.column(META_COLUMN))
        metas = table.filter(meta_mask).column(META_COLUMN).to_pylist()
        output = table.filter(pc.invert(meta_mask)).drop_columns([META_COLUMN])
        return _Stage(metas, output=output, driver_bytes=table.nbytes)
    from pyspark import StorageLevel  # "cache": the first action fills the cache

    cached = mapped.persist(StorageLevel.MEMORY_AND_DISK)
    with stage_errors(), without_adaptive_execution(spark):
        metas = [row[0] for row in cached.where(F.col(META_COLUMN).isNotNull())
                 .select(META_COLUMN).collect()]
    return _Stage(metas, cached=cached)


def _reports_of(metas: list[str], batch_id: int) -> dict[int, TaskReport]:
    """One report per state partition; two for one partition is an error."""
    reports: dict[int, TaskReport] = {}
    for text in metas:
        report = TaskReport.from_json(text, batch_id)
        if report.partition in reports:
            raise CommitValidationError(f"batch {batch_id}: two results for state "
                                        f"partition {report.partition}")
        reports[report.partition] = report
    return reports


def result_struct(output_schema: Any) -> Any:
    """The output schema, nullable all the way down (the meta rows hold nulls, and Arrow
    refuses a null struct whose fields are declared non-null), plus the meta column."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [StructField(f.name, _nullable_type(f.dataType), True, f.metadata)
              for f in output_schema.fields]
    return StructType([*fields, StructField(META_COLUMN, StringType(), True)])


def nullable_schema(output_schema: Any) -> Any:
    """`output_schema` with every field nullable, all the way down (a stage's output as its
    tasks return it)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, _nullable_type(f.dataType), True, f.metadata)
                       for f in output_schema.fields])


def _nullable_type(data_type: Any) -> Any:
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _nullable_type(f.dataType), True, f.metadata)
                           for f in data_type.fields])
    if isinstance(data_type, ArrayType):
        return ArrayType(_nullable_type(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(_nullable_type(data_type.keyType), _nullable_type(data_type.valueType),
                       True)
    return data_type
