"""The driver side of one stateful operator: one micro-batch = one stage, one commit entry.

The stateful stage runs exactly once per batch: one action brings its meta rows (one per
partition: the new checkpoint and the task's statistics) to the driver, so no later action can
recompute it and commit a second time. The output rows reach the sink by `outputMode`: "files"
(each task wrote them once to a file named after its commit; the sink reads exactly the files
of the validated attempts), "collect" (collected with the meta rows, so a batch's output must
fit in the driver's memory) or "cache" (persisted on the executors). See docs/api.md, "Output
modes".
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.batch_metrics import UploadProgress, batch_metrics
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS, LAYOUT, key_groups_in, layout_extra
from pyspark_dstl.spark.driver import query_lease as fencing
from pyspark_dstl.spark.driver import state_schemas
from pyspark_dstl.spark.driver.rescale_query import (
    KEY_TYPES,
    RESCALE,
    needs_rescale,
    rescale_in_child,
    rescaled_entry,
)
from pyspark_dstl.spark.keys.key_grouping import (
    GROUP_COLUMN,
    routing_longs,
)
from pyspark_dstl.spark.processors.initial_state import InitialState
from pyspark_dstl.spark.processors.processor import AnyProcessor
from pyspark_dstl.spark.pyspark_versions import arrow_schema
from pyspark_dstl.spark.query_settings import DstlSettings
from pyspark_dstl.spark.spark_errors import CommitValidationError, PartitionCountError
from pyspark_dstl.spark.stage.failures import stage_errors
from pyspark_dstl.spark.stage.open_stores import executor_stores
from pyspark_dstl.spark.stage.output_files import (
    StagedOutput,
    arrow_batches_limited,
    delete_batch,
    delete_before,
)
from pyspark_dstl.spark.stage.partition import (
    META_COLUMN,
    PARTITION_COLUMN,
    TaskPlan,
    stateful_task,
)
from pyspark_dstl.spark.stage.report import TaskReport
from pyspark_dstl.spark.time.clock import BatchClock, TimeSpec
from pyspark_dstl.spark.time.ticks import TickDemand, write_demand

ADAPTIVE_EXECUTION = "spark.sql.adaptive.enabled"
log = logging.getLogger(__name__)


@contextlib.contextmanager
def without_adaptive_execution(spark: Any) -> Iterator[None]:
    """Run the stage's action with adaptive execution off, then put the setting back.

    The stage's plan has nothing to adapt (exactly n state partitions, one task each), and
    adaptive execution would run its shuffle and its Python tasks as two Spark jobs instead of
    one job of two stages: a job's scheduling costs tens of milliseconds in every batch. Spark
    plans its own stateful operators without it as well. Inside foreachBatch the session is the
    query's own copy, so the change is seen by this query's batch only."""
    before = spark.conf.get(ADAPTIVE_EXECUTION)
    if str(before).lower() == "false":
        yield
        return
    spark.conf.set(ADAPTIVE_EXECUTION, "false")
    try:
        yield
    finally:
        spark.conf.set(ADAPTIVE_EXECUTION, before)


@dataclass(frozen=True)
class OperatorSpec:
    """What the user asked for; `partitions` None means: as recorded, else shuffle partitions."""

    processor: AnyProcessor
    key_columns: tuple[str, ...]
    output_schema: Any  # pyspark StructType
    location: str  # the checkpoint location's URL
    partitions: int | None = None
    name: str = "stateful"
    time: TimeSpec = field(default_factory=TimeSpec)
    initial_state: InitialState | None = None


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
    """One run of the stateful stage: its output and one task report per partition."""

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


@dataclass
class BatchProgress:
    """What one batch did; `StatefulQuery.progress` keeps these, the examples print them.

    The driver's own timings are fields; everything the tasks did is read from `metrics`, the
    same numbers the commit entry records and Spark's progress shows (docs/metrics.md)."""

    batch_id: int
    commit_path: str
    stage_seconds: float
    sink_seconds: float
    commit_log_seconds: float
    total_seconds: float
    metrics: dict[str, float]
    cleanup_deleted_files: int = 0
    watermark_ms: int = -1
    driver_bytes: int = 0  # Arrow bytes the stage's action brought to the driver

    def _count(self, name: str) -> int:
        return int(self.metrics.get(name, 0))

    @property
    def input_rows(self) -> int:
        return self._count("input_rows")

    @property
    def output_rows(self) -> int:
        return self._count("output_rows")

    @property
    def keys(self) -> int:
        return self._count("keys")

    @property
    def late_rows(self) -> int:
        return self._count("late_rows")

    @property
    def timers_fired(self) -> int:
        return self._count("timers_fired")

    @property
    def changelog_bytes(self) -> int:
        return self._count("changelog_bytes")

    @property
    def output_file_bytes(self) -> int:
        """outputMode "files": bytes of the committed output files."""
        return self._count("output_file_bytes")

    @property
    def materialized_partitions(self) -> int:
        return self._count("materialized_partitions")

    @property
    def max_task_commit_seconds(self) -> float:
        return float(self.metrics.get("commit_seconds", 0.0))

    @property
    def max_task_load_seconds(self) -> float:
        return float(self.metrics.get("load_seconds", 0.0))

    @property
    def load_kinds(self) -> dict[str, int]:
        """How the partitions' stores were loaded (reused, restored, ...): count per kind."""
        return {name[len("loads_"):]: int(value) for name, value in self.metrics.items()
                if name.startswith("loads_")}

    @property
    def upload(self) -> UploadProgress:
        return UploadProgress.from_metrics(self.metrics)


class StatefulOperator:
    """Runs a processor on micro-batches; use `process_batch` from foreachBatch."""

    def __init__(self, spec: OperatorSpec, settings: DstlSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.location = spec.location
        self._batches_since_cleanup = 0

    # --- storage on the driver (no RocksDB here: only the commit log and cleanup) -----------

    def _storage(self) -> Any:
        backend = executor_stores().backend(self.settings.backend_settings)
        return backend.context(self.location).storage

    def commit_log(self) -> CommitLog:
        return CommitLog(self._storage())

    # --- one batch ---------------------------------------------------------------------------

    def base_for(self, batch_id: int) -> BatchBase:
        """The entry `batch_id` builds on; a re-executed batch builds on the one before it."""
        log = self.commit_log()
        batches = log.batch_ids()
        later = [b for b in batches if b > batch_id]
        if later:
            raise CommitValidationError(
                f"the commit log under {self.location!r} already holds batch {max(later)} "
                f"but the engine runs batch {batch_id}: the Spark checkpoint and this "
                f"checkpoint do not belong together")
        earlier = [b for b in batches if b < batch_id]
        if not earlier:
            return BatchBase(None, None, rerun=batch_id in batches)
        previous = max(earlier)
        if previous != batch_id - 1:
            raise CommitValidationError(
                f"the commit log under {self.location!r} ends at batch {previous}, but the "
                f"engine runs batch {batch_id}: batches {previous + 1}..{batch_id - 1} were "
                f"never committed here, their state changes would be lost")
        return BatchBase(previous, log.read(previous), rerun=batch_id in batches)

    def num_partitions(self, base: BatchBase, spark: Any) -> int:
        """The partition count this batch runs with: as asked (builder, then
        spark.dstl.query.partitions), else as recorded, else spark.sql.shuffle.partitions. A
        count other than the recorded one rescales the state first (`rescaled`)."""
        recorded = None
        if base.entry is not None and self.spec.name in base.entry.operators:
            recorded = base.entry.operators[self.spec.name].num_partitions
            keys = base.entry.extra.get("key_columns")
            if keys is not None and tuple(keys) != self.spec.key_columns:
                raise PartitionCountError(
                    f"checkpoint {self.location!r} groups by {tuple(keys)}; the query groups "
                    f"by {self.spec.key_columns}: the grouping key cannot change")
        requested = self.spec.partitions or self.settings.query.partitions
        if requested is not None:
            return requested
        if recorded is not None:
            return recorded
        return int(spark.conf.get("spark.sql.shuffle.partitions"))

    def key_types(self, base: BatchBase, frame: Any) -> list[str]:
        """The key columns' Spark types; refused when they differ from the recorded ones
        (Spark hashes an int and a bigint differently: keys would reach other partitions)."""
        types = [frame.schema[name].dataType.simpleString() for name in self.spec.key_columns]
        recorded = base.entry.extra.get(KEY_TYPES) if base.entry is not None else None
        if recorded is not None and list(recorded) != types:
            raise PartitionCountError(
                f"checkpoint {self.location!r} was written with key column types "
                f"{list(recorded)} for {list(self.spec.key_columns)}; the query has {types}: "
                f"cast the key columns back (Spark hashes other types to other partitions)")
        return types

    def rescaled(self, base: BatchBase, n: int, key_types: list[str]) -> BatchBase:
        """`base` with its state redistributed over `n` partitions when it has another count,
        or migrated to key groups when it is of the hash layout (new stores, named by no
        commit entry until this batch's)."""
        if base.entry is None or not needs_rescale(base.entry, self.spec.name, n):
            return base
        migrating = key_groups_in(base.entry.extra) is None
        what = ("migrate the state of batch {b} to key groups over {n} partitions" if migrating
                else "rescale the state of batch {b} to {n} partitions")
        fencing.hold(self).check(what.format(b=base.batch_id, n=n))
        if migrating:
            log.warning("checkpoint %s: batch %s's state is in the hash layout, written before "
                        "key groups existed; migrating it to key groups once, key by key (later "
                        "rescales move ranges of key groups)", self.location, base.batch_id)
        done = rescale_in_child(self.settings.backend_settings, self.location, base.entry,
                                self.spec.name, n, key_types)
        log.warning("checkpoint %s: state of batch %s %s from %d to %d partitions (%d keys, "
                    "%.1f s, %s); the next commit entry switches to the new layout",
                    self.location, base.batch_id, "migrated" if migrating else "rescaled",
                    done.record["from_partitions"], n, done.record["keys"],
                    done.record["seconds"], done.record["method"])
        entry = rescaled_entry(base.entry, self.spec.name, done, key_types)
        return BatchBase(base.batch_id, entry, base.rerun, rescale=done.record)

    def execute(self, df: Any, batch_id: int, base: BatchBase | None = None) -> StageResult:
        """Run the stateful stage once; nothing is committed to the commit log yet."""

        started = time.monotonic()
        base = base if base is not None else self.base_for(batch_id)
        spark = df.sparkSession
        n = self.num_partitions(base, spark)
        self._check_partitions(base, n)
        key_types = self.key_types(base, df)
        base = self.rescaled(base, n, key_types)
        key_groups = self._key_groups(base)
        source = df
        if self.spec.initial_state is not None and base.entry is None:
            source = self.spec.initial_state.combine(df, self.spec.key_columns)
        keyed = _routed(source, self.spec.key_columns, n, key_groups)
        clock = BatchClock.for_batch(self.spec.time, base.entry, self._batch_time(base, batch_id))
        plan = self._task_plan(keyed, batch_id, n, base, clock, key_types, key_groups)
        task = functools.partial(stateful_task, plan, self.spec.processor)
        stage = _run_stage(keyed.mapInArrow(task, _result_struct(self.spec.output_schema)),
                           self.settings.query.output_mode)
        reports = _reports_of(stage.metas, batch_id)
        output, staged = stage.output, None
        if plan.output_files and output is not None:
            parts = tuple(r.output for _, r in sorted(reports.items()) if r.output is not None)
            staged = StagedOutput(self.location, plan.settings, plan.output_schema, parts,
                                  output)
            output = None
        result = StageResult(batch_id, base, n, output, reports, time.monotonic() - started,
                             stage.cached, clock, staged, stage.driver_bytes, key_types,
                             key_groups)
        try:
            self.validate(result)
        except CommitValidationError:
            self.release(result)
            raise
        return result

    def _check_partitions(self, base: BatchBase, n: int) -> None:
        """At most one partition per key group: a partition owning none would hold nothing."""
        limit = (key_groups_in(base.entry.extra) if base.entry is not None else None) \
            or KEY_GROUPS
        if not 1 <= n <= limit:
            raise PartitionCountError(
                f"checkpoint {self.location!r}: {n} state partitions, but its keys hash into "
                f"{limit} key groups: set partitions= (or spark.sql.shuffle.partitions for "
                f"the drop-in switch) to 1..{limit}")

    def _key_groups(self, base: BatchBase) -> int:
        """G of the checkpoint: as its newest entry records, KEY_GROUPS for a new one. State
        stored before key groups is refused (it must be migrated first: its keys would not be
        found)."""
        if base.entry is None or self.spec.name not in base.entry.operators:
            return KEY_GROUPS
        recorded = key_groups_in(base.entry.extra)
        if recorded is None:
            raise CommitValidationError(
                f"checkpoint {self.location!r}: batch {base.batch_id} stores grouping keys "
                f"without their key group (written before key groups, its commit entry has "
                f"no {LAYOUT!r}); migrate the checkpoint to the key group layout first")
        return recorded

    def _task_plan(self, keyed: Any, batch_id: int, n: int, base: BatchBase,
                   clock: BatchClock, key_types: list[str] | None = None,
                   key_groups: int = KEY_GROUPS) -> TaskPlan:
        """What every task of the batch gets: plain data, shipped inside the task closure."""
        zone = keyed.sparkSession.conf.get("spark.sql.session.timeZone")  # Arrow's timestamps
        return TaskPlan(
            location=self.location, operator=self.spec.name, num_partitions=n,
            batch_id=batch_id, now_ms=clock.now_ms,
            key_columns=self.spec.key_columns, settings=self.settings.backend_settings,
            input_schema=arrow_schema(keyed.schema, zone),
            output_schema=arrow_schema(self.spec.output_schema, zone),
            bases={p: info.to_dict() for p, info in base.infos(self.spec.name).items()},
            time_mode=clock.mode, watermark_ms=clock.watermark_ms,
            event_time_column=self.spec.time.event_time_column,
            late_threshold_ms=clock.late_threshold_ms,
            output_files=self.settings.query.output_mode == "files",
            inline_bytes=self.settings.query.output_inline_bytes,
            key_types=tuple(key_types or ()), key_groups=key_groups)

    def release(self, result: StageResult) -> None:
        """Let go of a batch's output once the batch is done (committed or given up): the
        cached stage result, or every output file of the batch (also of attempts that were
        not chosen)."""
        result.release()
        staged, result.staged = result.staged, None
        if staged is not None and staged.files:  # all inline: attempts that wrote files
            # anyway go with the next cleanup, without two more requests per batch here
            fencing.hold(self).check(f"delete the output files of batch {result.batch_id}")
            delete_batch(self._storage(), self.spec.name, result.batch_id)

    def _batch_time(self, base: BatchBase, batch_id: int) -> int:
        """The batch's processing time: the wall clock, except for a batch the engine runs
        again after it was committed here, which keeps the time it ran with (as Spark keeps a
        batch's timestamp in its offset log), so TTL and timers decide the same way."""
        if base.rerun:
            recorded = self.commit_log().read(batch_id).extra.get("time") or {}
            if "now_ms" in recorded:
                return int(recorded["now_ms"])
        return int(time.time() * 1000)

    def validate(self, result: StageResult) -> None:
        """Every partition committed exactly once, on top of the previous commit."""
        previous = result.base.infos(self.spec.name)
        missing = sorted(set(range(result.num_partitions)) - set(result.infos))
        if missing:
            raise CommitValidationError(f"batch {result.batch_id}: no checkpoint from state "
                                        f"partition(s) {missing}")
        if result.staged is not None:
            written = {part.partition for part in result.staged.parts}
            unnamed = sorted(set(result.infos) - written)
            if unnamed:
                raise CommitValidationError(f"batch {result.batch_id}: state partition(s) "
                                            f"{unnamed} named no output file")
            if result.staged.inline.num_rows != result.staged.inline_rows:
                raise CommitValidationError(
                    f"batch {result.batch_id}: {result.staged.inline.num_rows} output rows "
                    f"came with the meta rows, the tasks reported "
                    f"{result.staged.inline_rows}")
        for partition, info in sorted(result.infos.items()):
            before = previous.get(partition)
            expected = (before.version + 1, before.unique_id) if before else (1, None)
            if (info.version, info.base_unique_id) != expected:
                raise CommitValidationError(
                    f"batch {result.batch_id}: store {info.store_id!r} committed version "
                    f"{info.version} on base id {info.base_unique_id!r}, expected version "
                    f"{expected[0]} on base id {expected[1]!r} (the committed checkpoint of "
                    f"batch {result.base.batch_id})")

    def commit(self, result: StageResult) -> str:
        """Write the batch's commit log entry (the next generation if one exists)."""
        entry = CommitEntry(
            result.batch_id,
            {self.spec.name: OperatorCommit(result.num_partitions, dict(result.infos))},
            extra={"key_columns": list(self.spec.key_columns), KEY_TYPES: result.key_types,
                   **layout_extra(result.key_groups),
                   **({RESCALE: result.base.rescale} if result.base.rescale else {}),
                   "processor": type(self.spec.processor).__name__,
                   **_pyspark_entry(self.spec.processor),
                   "output_schema": self.spec.output_schema.json(),
                   "metrics": self.metrics_of(result), "stage_seconds": result.seconds,
                   **self._time_extra(result), **state_schemas.commit_extra(self)})
        path = self.commit_log().write(result.batch_id, entry, lease=fencing.hold(self),
                                       rerun=result.base.rerun)
        self.publish_demand(result.batch_id, entry.extra)
        return path

    def _time_extra(self, result: StageResult) -> dict[str, Any]:
        if result.clock is None:
            return {}
        return {"time": result.clock.record(result.stats.values())}

    def publish_latest_demand(self) -> None:
        """At query start: what the newest commit asked for (it may have been written by a
        run on another host)."""
        latest = self.commit_log().latest()
        if latest is None:
            self.publish_demand(None, None)
        else:
            self.publish_demand(latest[0], latest[1].extra)

    def publish_demand(self, batch_id: int | None, extra: Mapping[str, Any] | None) -> None:
        """Tell the tick source whether the next trigger needs a batch even without input."""
        location = self.spec.time.tick_file
        if location is None:
            return
        write_demand(location, TickDemand.from_commit(batch_id, (extra or {}).get("time")))

    def metrics_of(self, result: StageResult) -> dict[str, float]:
        return batch_metrics(result.stats, result.infos, result.base.infos(self.spec.name))

    def output_frame(self, spark: Any, result: StageResult) -> Any:
        """The stage's output as a DataFrame for the sink: read from the committed attempts'
        files, from the collected Arrow data, or the cached stage result without its meta
        rows."""
        if result.staged is not None:
            return result.staged.frame(spark, self.spec.output_schema)
        if result.cached is not None:
            return result.cached.where(result.cached[META_COLUMN].isNull()).drop(META_COLUMN)
        if result.output is None:
            raise CommitValidationError(f"batch {result.batch_id}: the stage output was "
                                        f"already released")
        with arrow_batches_limited(spark, result.output.num_rows):
            return spark.createDataFrame(result.output, schema=self.spec.output_schema)

    def maybe_cleanup(self, batch_id: int | None = None) -> int:
        """Every `cleanupInterval` batches: delete what retained checkpoints no longer need,
        and output files of batches before `batch_id` (attempts that finished late)."""
        interval = self.settings.query.cleanup_interval
        if interval == 0:
            return 0
        self._batches_since_cleanup += 1
        if self._batches_since_cleanup < interval:
            return 0
        self._batches_since_cleanup = 0
        lease = fencing.hold(self)
        report = cleanup_checkpoint(
            self._storage(), self.settings.backend.min_batches_to_retain, dry_run=False,
            lease=lease, feed_hold_limit=self.settings.backend.max_batches_held_for_feeds)
        outputs = 0
        if batch_id is not None:
            lease.check(f"delete output files of batches before {batch_id}")
            outputs = delete_before(self._storage(), self.spec.name, batch_id)
        return len(report.files) + outputs

    def process_batch(self, df: Any, batch_id: int, sink: Any = None) -> BatchProgress:
        """Stage, sink, commit entry, cleanup: what foreachBatch calls for each batch."""
        started = time.monotonic()
        fencing.hold(self).check(f"run batch {batch_id}")
        state_schemas.ensure_settled(self)
        result = self.execute(df, batch_id)
        try:
            sink_started = time.monotonic()
            if sink is not None:
                sink(self.output_frame(df.sparkSession, result), batch_id)
            commit_started = time.monotonic()
            path = self.commit(result)
            committed = time.monotonic()
        finally:
            self.release(result)
        deleted = self.maybe_cleanup(batch_id)
        return BatchProgress(
            batch_id=result.batch_id, commit_path=path, stage_seconds=result.seconds,
            sink_seconds=commit_started - sink_started,
            commit_log_seconds=committed - commit_started,
            total_seconds=time.monotonic() - started, metrics=self.metrics_of(result),
            cleanup_deleted_files=deleted,
            watermark_ms=result.clock.watermark_ms if result.clock is not None else -1,
            driver_bytes=result.driver_bytes)


def _pyspark_entry(processor: Any) -> dict[str, str]:
    """Which PySpark call runs a PySpark processor (transformWithStateInPandas or
    transformWithState) and its outputMode: export-state makes Spark's operator the same
    call (Spark refuses a checkpoint whose operator had another outputMode)."""
    entry = getattr(processor, "entry", None)
    if not isinstance(entry, str):
        return {}
    return {"pyspark_entry": entry,
            "pyspark_output_mode": str(getattr(processor, "output_mode", "Update"))}


@dataclass
class _Stage:
    """What the stage's one action brought back: the meta rows' reports (JSON), and the
    output as Arrow on the driver ("collect", "files") or the persisted result ("cache")."""

    metas: list[str]
    output: pa.Table | None = None
    cached: Any = None
    driver_bytes: int = 0


def _routed(source: Any, key_columns: tuple[str, ...], n: int, key_groups: int) -> Any:
    """`source` with each row's key group (GROUP_COLUMN, pmod(hash(keys), G)) and state
    partition (PARTITION_COLUMN, the group's owner: group * n div G), repartitioned so that
    every row lands in exactly that partition: repartition(n, e) sends a row to
    pmod(hash(e), n), so e is a long chosen per partition to hash there (routing_longs)."""
    from pyspark.sql import functions as F

    # as few calls to the JVM as the expressions allow: each costs the driver time per batch
    group = F.pmod(F.hash(*[F.col(name) for name in key_columns]), F.lit(key_groups))
    partition = F.expr(f"CAST((`{GROUP_COLUMN}` * {n}) div {key_groups} AS INT)")
    routes = ", ".join(f"CAST({value} AS BIGINT)" for value in routing_longs(n))
    route = F.expr(f"element_at(array({routes}), `{PARTITION_COLUMN}` + 1)")
    return (source.withColumns({GROUP_COLUMN: group, PARTITION_COLUMN: partition})
            .repartition(n, route))


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


def _result_struct(output_schema: Any) -> Any:
    """The output schema, nullable all the way down (the meta rows hold nulls, and Arrow
    refuses a null struct whose fields are declared non-null), plus the meta column."""
    from pyspark.sql.types import StringType, StructField, StructType

    fields = [StructField(f.name, _nullable_type(f.dataType), True, f.metadata)
              for f in output_schema.fields]
    return StructType([*fields, StructField(META_COLUMN, StringType(), True)])


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
