"""The driver's side of the stateful steps chained after the first one.

Each chained step is one more operator of the same batch: its stage reads the previous
operator's output of this batch (through the stateless steps in between and the step's own
projection, `ChainLink.prepare`), its stores live under the same checkpoint location with the
operator name `<first>.<position>`, and the first operator's commit entry records them, so one
commit, one lease and one restore point cover the whole chain.

Watermarks follow Spark 4's propagation through the chain: every operator filters late rows
with the previous batch's watermark and evicts (fires timers) with this batch's; a
transformWithState in processing time passes no watermark on, so the operators after it see
Spark's value for none, 0.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.backend.ops.batch_metrics import batch_metrics
from pyspark_dstl.spark.chain.links import ChainLink, chained_name
from pyspark_dstl.spark.driver.stage_run import (
    BatchBase,
    StageResult,
    never_pruned,
    routed,
    run_stage,
    validate_stage,
)
from pyspark_dstl.spark.operator_list import CHAIN
from pyspark_dstl.spark.pyspark_versions import arrow_schema
from pyspark_dstl.spark.spark_errors import CommitValidationError, PartitionCountError
from pyspark_dstl.spark.stage.partition import TaskPlan
from pyspark_dstl.spark.time.clock import INITIAL_WATERMARK_MS, BatchClock
from pyspark_dstl.spark.time.modes import EVENT_TIME, PROCESSING_TIME


@dataclass(frozen=True)
class ChainWatermarks:
    """What one chained operator gets this batch: rows at or before `late_ms` are late, and
    timers and evictions fire at or before `evict_ms`."""

    late_ms: int
    evict_ms: int


class _Owner(Protocol):
    """What a chained operator needs of the query's first operator."""

    spec: Any
    settings: Any
    location: str

    def release(self, result: StageResult) -> None: ...


def chain_watermarks(spec: Any, clock: BatchClock | None) -> list[ChainWatermarks]:
    """The watermarks of every chained operator of `spec`'s query in this batch."""
    if clock is None or not clock.event_time:
        return [ChainWatermarks(INITIAL_WATERMARK_MS, INITIAL_WATERMARK_MS)
                for _ in spec.chain]
    swallowed = spec.time.mode == PROCESSING_TIME
    marks = []
    for link in spec.chain:
        if swallowed:
            marks.append(ChainWatermarks(INITIAL_WATERMARK_MS, INITIAL_WATERMARK_MS))
        else:
            marks.append(ChainWatermarks(clock.previous_watermark_ms, clock.watermark_ms))
        swallowed = swallowed or link.swallows_watermark
    return marks


def recorded_chain(entry: CommitEntry | None) -> list[Mapping[str, Any]]:
    """The records an entry keeps of its chained operators, in order (none: empty)."""
    if entry is None:
        return []
    records = entry.extra.get(CHAIN) or []
    return [record for record in records if isinstance(record, Mapping)]


class ChainedOperator:
    """The step at `position` (1, 2, ...) after the query's first operator."""

    def __init__(self, owner: _Owner, link: ChainLink, position: int) -> None:
        self.owner = owner
        self.link = link
        self.position = position
        self.name = chained_name(owner.spec.name, position)

    def execute(self, source: Any, first: StageResult, marks: ChainWatermarks) -> StageResult:
        """Run this operator's stage on `source` (the previous operator's output of the same
        batch), on the partitions and key groups of the first operator's stage."""
        started = time.monotonic()
        frame = self.link.prepare(source)
        base = first.base
        key_types = self.key_types(base, frame)
        keyed = routed(never_pruned(frame), self.link.key_columns, first.num_partitions,
                       first.key_groups)
        clock = self._clock(first.clock, marks)
        plan = self._task_plan(keyed, first, clock, marks, key_types)
        result = run_stage(keyed, plan, self.link.processor, self.link.output_schema,
                           self.owner.settings.query.output_mode, first.batch_id, base, clock,
                           key_types, started)
        try:
            validate_stage(result)
        except CommitValidationError:
            self.owner.release(result)
            raise
        kill_point("stage_done")
        return result

    def _clock(self, first: BatchClock | None, marks: ChainWatermarks) -> BatchClock:
        now = first.now_ms if first is not None else int(time.time() * 1000)
        late = marks.late_ms if self.link.late_column is not None else None
        return BatchClock(self.link.time_mode, now, marks.evict_ms,
                          late if self.link.time_mode == EVENT_TIME else None,
                          first.delay_ms if first is not None else 0,
                          bool(first is not None and first.event_time),
                          marks.late_ms)

    def _task_plan(self, keyed: Any, first: StageResult, clock: BatchClock,
                   marks: ChainWatermarks, key_types: list[str]) -> TaskPlan:
        zone = keyed.sparkSession.conf.get("spark.sql.session.timeZone")
        checked = self.link.emits_event_time if clock.event_time else None
        settings = self.owner.settings
        return TaskPlan(
            location=self.owner.location, operator=self.name,
            num_partitions=first.num_partitions, batch_id=first.batch_id, now_ms=clock.now_ms,
            key_columns=self.link.key_columns, settings=settings.backend_settings,
            input_schema=arrow_schema(keyed.schema, zone),
            output_schema=arrow_schema(self.link.output_schema, zone),
            bases={p: info.to_dict() for p, info in first.base.infos(self.name).items()},
            time_mode=clock.mode, watermark_ms=clock.watermark_ms,
            event_time_column=self.link.late_column,
            late_threshold_ms=clock.late_threshold_ms,
            output_files=settings.query.output_mode == "files",
            inline_bytes=settings.query.output_inline_bytes,
            key_types=tuple(key_types), key_groups=first.key_groups,
            output_event_time=checked, output_late_ms=marks.late_ms if checked else None)

    def key_types(self, base: BatchBase, frame: Any) -> list[str]:
        """The key columns' Spark types, refused when they differ from the recorded ones."""
        types = [frame.schema[name].dataType.simpleString() for name in self.link.key_columns]
        recorded = self.recorded(base.entry)
        if recorded is not None and list(recorded.get("key_types") or types) != types:
            raise PartitionCountError(
                f"checkpoint {self.owner.location!r}, operator {self.name!r} "
                f"({self.link.label}): written with key column types "
                f"{list(recorded['key_types'])}; the query has {types}: cast the key columns "
                f"back (Spark hashes other types to other partitions)")
        return types

    def recorded(self, entry: CommitEntry | None) -> Mapping[str, Any] | None:
        """What `entry` recorded of this operator, if it did."""
        for record in recorded_chain(entry):
            if record.get("name") == self.name:
                return record
        return None

    def record_of(self, result: StageResult) -> dict[str, Any]:
        """What the commit entry keeps of this operator in the batch of `result`."""
        return {"name": self.name, "position": self.position, "kind": self.link.kind,
                "label": self.link.label, **dict(self.link.record),
                "key_columns": list(self.link.key_columns), "key_types": result.key_types,
                "output_schema": self.link.output_schema.json(),
                "metrics": batch_metrics(result.stats, result.infos,
                                         result.base.infos(self.name)),
                "stage_seconds": result.seconds}
