"""The driver side of a stateful query: one micro-batch = one commit entry.

Each operator's stage runs exactly once per batch (`stage_run.py`): one action brings its meta
rows (one per partition: the new checkpoint and the task's statistics) to the driver, so no
later action can recompute it and commit a second time. A query has one operator, the first
stateful step, plus one per stateful step chained after it (`chained.py`); they run one after
the other on the batch, each reading the previous one's output, and one commit entry records
them all (one commit, one lease, one restore point). The output rows reach the next operator
and the sink by `outputMode`: "files" (each task wrote them once to a file named after its
commit; readers read exactly the files of the validated attempts), "collect" (collected with
the meta rows, so a batch's output must fit in the driver's memory) or "cache" (persisted on
the executors). See docs/api.md, "Output modes".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.ops.batch_metrics import UploadProgress, batch_metrics
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS, LAYOUT, key_groups_in, layout_extra
from pyspark_dstl.spark.chain.links import ChainLink
from pyspark_dstl.spark.driver import query_lease as fencing
from pyspark_dstl.spark.driver import state_schemas
from pyspark_dstl.spark.driver.chained import (
    CHAIN,
    ChainedOperator,
    chain_watermarks,
    recorded_chain,
)
from pyspark_dstl.spark.driver.rescale_query import (
    KEY_TYPES,
    RESCALE,
    needs_rescale,
    rescale_in_child,
    rescaled_entry,
)
from pyspark_dstl.spark.driver.stage_run import (
    ADAPTIVE_EXECUTION,
    BatchBase,
    StageResult,
    routed,
    run_stage,
    stage_output_frame,
    validate_stage,
    without_adaptive_execution,
)
from pyspark_dstl.spark.processors.initial_state import InitialState
from pyspark_dstl.spark.processors.processor import AnyProcessor
from pyspark_dstl.spark.pyspark_versions import arrow_schema
from pyspark_dstl.spark.query_settings import DstlSettings
from pyspark_dstl.spark.spark_errors import CommitValidationError, PartitionCountError
from pyspark_dstl.spark.stage.open_stores import executor_stores
from pyspark_dstl.spark.stage.output_files import delete_batch, delete_before
from pyspark_dstl.spark.stage.partition import TaskPlan
from pyspark_dstl.spark.time.clock import BatchClock, TimeSpec
from pyspark_dstl.spark.time.ticks import TickDemand, write_demand

__all__ = ["ADAPTIVE_EXECUTION", "BatchBase", "BatchProgress", "OperatorSpec", "StageResult",
           "StatefulOperator", "without_adaptive_execution"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorSpec:
    """What the user asked for; `partitions` None means: as recorded, else shuffle partitions.

    `chain`: the stateful steps after this one, in order; `query_output_mode`: the query's
    output mode (append, update, complete), which decides what a chained aggregation emits;
    `output_event_time`: the output column named by transformWithState's
    eventTimeColumnName (every row's must be later than the late-events watermark)."""

    processor: AnyProcessor
    key_columns: tuple[str, ...]
    output_schema: Any  # pyspark StructType
    location: str  # the checkpoint location's URL
    partitions: int | None = None
    name: str = "stateful"
    time: TimeSpec = field(default_factory=TimeSpec)
    initial_state: InitialState | None = None
    chain: tuple[ChainLink, ...] = ()
    query_output_mode: str = "append"
    output_event_time: str | None = None


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
    # the metrics of each step chained after the first, by operator name (`metrics` are the
    # first step's)
    chained_metrics: dict[str, dict[str, float]] = field(default_factory=dict)

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
    """Runs a processor (and the steps chained after it) on micro-batches; use
    `process_batch` from foreachBatch."""

    def __init__(self, spec: OperatorSpec, settings: DstlSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.location = spec.location
        self._batches_since_cleanup = 0
        self._commit_log: CommitLog | None = None
        self._commit_log_storage: Any = None
        self._input_schemas: dict[tuple[str, str], Any] = {}
        self.chained = tuple(ChainedOperator(self, link, position)
                             for position, link in enumerate(spec.chain, start=1))
        # the chained steps' state is checked against the newest commit once, before the
        # first batch (driver/state_schemas.py)
        self._chain_checked = not self.chained

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its storage client (Spark Connect ships foreachBatch to a server
        process): the commit log is opened again where it runs."""
        return {**self.__dict__, "_commit_log": None, "_commit_log_storage": None}

    @property
    def operator_names(self) -> tuple[str, ...]:
        """Every operator of the query, the first stateful step first."""
        return (self.spec.name, *(op.name for op in self.chained))

    # --- storage on the driver (no RocksDB here: only the commit log and cleanup) -----------

    def _storage(self) -> Any:
        backend = executor_stores().backend(self.settings.backend_settings)
        return backend.context(self.location).storage

    def commit_log(self) -> CommitLog:
        """The query's commit log, one object for every batch: what it learned of the
        records (entry or fence: they never change) spares reading each retained entry again
        in every batch."""
        storage = self._storage()
        if self._commit_log is None or self._commit_log_storage is not storage:
            self._commit_log, self._commit_log_storage = CommitLog(storage), storage
        return self._commit_log

    # --- one batch ---------------------------------------------------------------------------

    def base_for(self, batch_id: int) -> BatchBase:
        """The entry `batch_id` builds on; a re-executed batch builds on the one before it."""
        log = self.commit_log()
        listed = log.generations()  # one listing for the whole look-up
        batches = log.batch_ids(listed)
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
        return BatchBase(previous, log.read(previous, listed), rerun=batch_id in batches)

    def num_partitions(self, base: BatchBase, spark: Any) -> int:
        """The partition count this batch runs with: as asked (builder, then
        spark.dstl.query.partitions), else as recorded, else spark.sql.shuffle.partitions. A
        count other than the recorded one rescales the state first (`rescaled`). Every
        operator of a chain has the first one's count."""
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
        commit entry until this batch's); every operator of a chain moves with the first."""
        if base.entry is None or not any(needs_rescale(base.entry, name, n)
                                         for name in self.operator_names):
            return base
        migrating = key_groups_in(base.entry.extra) is None
        what = ("migrate the state of batch {b} to key groups over {n} partitions" if migrating
                else "rescale the state of batch {b} to {n} partitions")
        fencing.hold(self).check(what.format(b=base.batch_id, n=n))
        if migrating:
            log.warning("checkpoint %s: batch %s's state is in the hash layout, written before "
                        "key groups existed; migrating it to key groups once, key by key (later "
                        "rescales move ranges of key groups)", self.location, base.batch_id)
        entry, record = base.entry, None
        for name in self.operator_names:
            if not needs_rescale(entry, name, n):
                continue
            types = key_types if name == self.spec.name else []
            done = rescale_in_child(self.settings.backend_settings, self.location, entry, name,
                                    n, types)
            log.warning("checkpoint %s: state of operator %s at batch %s %s from %d to %d "
                        "partitions (%d keys, %.1f s, %s); the next commit entry switches to "
                        "the new layout", self.location, name, base.batch_id,
                        "migrated" if migrating else "rescaled",
                        done.record["from_partitions"], n, done.record["keys"],
                        done.record["seconds"], done.record["method"])
            entry = rescaled_entry(entry, name, done, types)
            record = record or done.record
        return BatchBase(base.batch_id, entry, base.rerun, rescale=record)

    def execute(self, df: Any, batch_id: int, base: BatchBase | None = None) -> StageResult:
        """Run the first operator's stage once; nothing is committed to the commit log yet."""

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
        keyed = routed(source, self.spec.key_columns, n, key_groups)
        clock = BatchClock.for_batch(self.spec.time, base.entry, self._batch_time(base, batch_id))
        plan = self._task_plan(keyed, batch_id, n, base, clock, key_types, key_groups, source)
        result = run_stage(keyed, plan, self.spec.processor, self.spec.output_schema,
                           self.settings.query.output_mode, batch_id, base, clock, key_types,
                           started)
        try:
            self.validate(result)
        except CommitValidationError:
            self.release(result)
            raise
        kill_point("stage_done")
        return result

    def execute_chain(self, spark: Any, first: StageResult) -> list[StageResult]:
        """Run every chained operator's stage on the output of the one before it (after the
        stateless steps in between); the first operator's result is `first`. Each output is
        let go once the next stage has read it, except the last one's (the sink's)."""
        results: list[StageResult] = []
        previous = first
        watermarks = chain_watermarks(self.spec, first.clock)
        for operator, marks in zip(self.chained, watermarks, strict=True):
            source = self.output_frame(spark, previous)
            try:
                result = operator.execute(source, first, marks)
            except BaseException:
                for done in results:
                    self.release(done)
                raise
            if previous is not first:
                self.release(previous)
            results.append(result)
            previous = result
        return results

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
                   key_groups: int = KEY_GROUPS, source: Any = None) -> TaskPlan:
        """What every task of the batch gets: plain data, shipped inside the task closure."""
        zone = keyed.sparkSession.conf.get("spark.sql.session.timeZone")  # Arrow's timestamps
        checked = self.spec.output_event_time if clock.event_time else None
        input_schema = self._input_schema(keyed, zone, source)
        return TaskPlan(
            location=self.location, operator=self.spec.name, num_partitions=n,
            batch_id=batch_id, now_ms=clock.now_ms,
            key_columns=self.spec.key_columns, settings=self.settings.backend_settings,
            input_schema=input_schema,
            output_schema=arrow_schema(self.spec.output_schema, zone),
            bases={p: info.to_dict() for p, info in base.infos(self.spec.name).items()},
            time_mode=clock.mode, watermark_ms=clock.watermark_ms,
            event_time_column=self.spec.time.event_time_column,
            late_threshold_ms=clock.late_threshold_ms,
            output_files=self.settings.query.output_mode == "files",
            inline_bytes=self.settings.query.output_inline_bytes,
            key_types=tuple(key_types or ()), key_groups=key_groups,
            output_event_time=checked,
            output_late_ms=clock.previous_watermark_ms if checked else None)

    def _input_schema(self, keyed: Any, zone: str, source: Any) -> Any:
        """The tasks' Arrow input schema. `keyed` adds the same two columns to `source` in
        every batch, so it is asked of Spark (a round trip and the schema's JSON) only when the
        batch's `source` schema or time zone is new; `source` None: always asked."""
        if source is None:
            return arrow_schema(keyed.schema, zone)
        key = (source.schema.json(), zone)
        if key not in self._input_schemas:
            self._input_schemas.clear()  # the newest only
            self._input_schemas[key] = arrow_schema(keyed.schema, zone)
        return self._input_schemas[key]

    def release(self, result: StageResult) -> None:
        """Let go of a batch's output once the batch is done (committed or given up): the
        cached stage result, or every output file of the batch (also of attempts that were
        not chosen)."""
        result.release()
        staged, result.staged = result.staged, None
        if staged is not None and staged.files:  # all inline: attempts that wrote files
            # anyway go with the next cleanup, without two more requests per batch here
            fencing.hold(self).check(f"delete the output files of batch {result.batch_id}")
            delete_batch(self._storage(), result.operator or self.spec.name, result.batch_id)

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
        if not result.operator:
            result.operator = self.spec.name
        validate_stage(result)

    def commit(self, result: StageResult, chained: list[StageResult] | None = None) -> str:
        """Write the batch's commit log entry (the next generation if one exists): the first
        operator's stores and those of every chained operator, in one entry."""
        chained = list(chained or ())
        if len(chained) != len(self.chained):
            raise CommitValidationError(
                f"batch {result.batch_id}: {len(chained)} chained stage result(s) for "
                f"{len(self.chained)} chained operator(s); every operator of the query commits "
                f"in the same entry")
        operators = {self.spec.name: OperatorCommit(result.num_partitions, dict(result.infos))}
        for operator, done in zip(self.chained, chained, strict=True):
            operators[operator.name] = OperatorCommit(done.num_partitions, dict(done.infos))
        extra: dict[str, Any] = {
            "key_columns": list(self.spec.key_columns), KEY_TYPES: result.key_types,
            **layout_extra(result.key_groups),
            **({RESCALE: result.base.rescale} if result.base.rescale else {}),
            "processor": type(self.spec.processor).__name__,
            **_pyspark_entry(self.spec.processor),
            "output_schema": self.spec.output_schema.json(),
            "metrics": self.metrics_of(result), "stage_seconds": result.seconds,
            **self._time_extra(result), **state_schemas.commit_extra(self)}
        if self.chained:
            extra[CHAIN] = [operator.record_of(done)
                            for operator, done in zip(self.chained, chained, strict=True)]
            self._chain_timers(extra, chained)
        entry = CommitEntry(result.batch_id, operators, extra=extra)
        path = self.commit_log().write(result.batch_id, entry, lease=fencing.hold(self),
                                       rerun=result.base.rerun)
        self.publish_demand(result.batch_id, entry.extra)
        return path

    def _chain_timers(self, extra: dict[str, Any], chained: list[StageResult]) -> None:
        """A chained transformWithState in processing time asks for a batch when its
        earliest timer is due, like the first step (time/ticks.py)."""
        timers = [report.next_timer_ms for operator, done in zip(self.chained, chained,
                                                                 strict=True)
                  if operator.link.time_mode == "processing_time"
                  for report in done.reports.values() if report.next_timer_ms is not None]
        if timers and isinstance(extra.get("time"), dict):
            extra["time"] = {**extra["time"], "chain_next_timer_ms": min(timers)}

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
        return batch_metrics(result.stats, result.infos,
                             result.base.infos(result.operator or self.spec.name))

    def output_frame(self, spark: Any, result: StageResult) -> Any:
        """A stage's output as a DataFrame for the next operator or the sink: read from the
        committed attempts' files, from the collected Arrow data, or the cached stage result
        without its meta rows."""
        if result.output_schema is None:
            result.output_schema = self.spec.output_schema
        return stage_output_frame(spark, result)

    def recorded_chain(self, base: BatchBase) -> list[Mapping[str, Any]]:
        """What the entry `base` recorded of the chained operators (empty without any)."""
        return recorded_chain(base.entry)

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
            for name in self.operator_names:
                outputs += delete_before(self._storage(), name, batch_id)
        return len(report.files) + outputs

    def process_batch(self, df: Any, batch_id: int, sink: Any = None) -> BatchProgress:
        """Stages (the first operator's, then each chained one's), sink, commit entry,
        cleanup: what foreachBatch calls for each batch."""
        started = time.monotonic()
        fencing.hold(self).check(f"run batch {batch_id}")
        state_schemas.ensure_settled(self)
        result = self.execute(df, batch_id)
        chained: list[StageResult] = []
        try:
            chained = self.execute_chain(df.sparkSession, result)
            last = chained[-1] if chained else result
            sink_started = time.monotonic()
            if sink is not None:
                sink(self.output_frame(df.sparkSession, last), batch_id)
            commit_started = time.monotonic()
            path = self.commit(result, chained)
            committed = time.monotonic()
        finally:
            self.release(result)
            for done in chained:
                self.release(done)
        deleted = self.maybe_cleanup(batch_id)
        return BatchProgress(
            batch_id=result.batch_id, commit_path=path,
            stage_seconds=result.seconds + sum(done.seconds for done in chained),
            sink_seconds=commit_started - sink_started,
            commit_log_seconds=committed - commit_started,
            total_seconds=time.monotonic() - started, metrics=self.metrics_of(result),
            cleanup_deleted_files=deleted,
            watermark_ms=result.clock.watermark_ms if result.clock is not None else -1,
            driver_bytes=result.driver_bytes + sum(done.driver_bytes for done in chained),
            chained_metrics={operator.name: self.metrics_of(done)
                             for operator, done in zip(self.chained, chained, strict=True)})


def _pyspark_entry(processor: Any) -> dict[str, str]:
    """Which PySpark call runs a PySpark processor (transformWithStateInPandas or
    transformWithState) and its outputMode: export-state makes Spark's operator the same
    call (Spark refuses a checkpoint whose operator had another outputMode)."""
    entry = getattr(processor, "entry", None)
    if not isinstance(entry, str):
        return {}
    return {"pyspark_entry": entry,
            "pyspark_output_mode": str(getattr(processor, "output_mode", "Update"))}
