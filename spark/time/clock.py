"""The clocks of a batch: processing time, the event-time watermark and the late-row threshold.

The driver picks them from the commit entry the batch builds on, so a re-executed batch sees
the same watermark, and records what the next batch needs in the new entry (it survives
restarts). As in Spark, the watermark a batch evicts and fires timers with was computed from
the rows of earlier batches, and rows are late against the previous batch's watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.time.modes import NO_TIME, TIME_MODES
from pyspark_dstl.spark.time.watermark import next_watermark_ms

INITIAL_WATERMARK_MS = 0  # Spark's watermark before any event time was seen


@dataclass(frozen=True)
class TimeSpec:
    """What the query asked for: a time mode, an event-time column and its watermark delay."""

    mode: str = "none"
    event_time_column: str | None = None
    watermark_delay_ms: int = 0
    tick_file: str | None = None  # where the driver tells the tick source what it needs

    def __post_init__(self) -> None:
        if self.mode not in TIME_MODES:
            raise ConfigError(f"time_mode: must be one of {', '.join(TIME_MODES)}, got "
                              f"{self.mode!r}")
        if self.watermark_delay_ms < 0:
            raise ConfigError(f"watermark delay: must not be negative, got "
                              f"{self.watermark_delay_ms} ms")
        if self.mode == "event_time" and self.event_time_column is None:
            raise ConfigError("time_mode: \"event_time\" needs an event-time column "
                              "(event_time=... with a watermark delay, or df.withWatermark)")

    @property
    def needs_ticks(self) -> bool:
        """Timers can fall due without input only with a time mode."""
        return self.mode != "none"


@dataclass(frozen=True)
class BatchClock:
    mode: str
    now_ms: int
    watermark_ms: int
    late_threshold_ms: int | None
    delay_ms: int
    event_time: bool
    # the previous batch's watermark (Spark's watermark for late events), whatever the mode:
    # rows emitted with an event time at or before it are refused, chained operators drop
    # late rows against it
    previous_watermark_ms: int = INITIAL_WATERMARK_MS

    @classmethod
    def for_batch(cls, spec: TimeSpec, base: CommitEntry | None, now_ms: int) -> BatchClock:
        if spec.event_time_column is None:
            return cls(spec.mode, now_ms, NO_TIME, None, 0, False)
        recorded: Mapping[str, Any] = (base.extra.get("time") or {}) if base is not None else {}
        watermark = int(recorded.get("next_watermark_ms", INITIAL_WATERMARK_MS))
        # as in Spark's transformWithState, late rows are dropped only in event time; the
        # watermark itself advances in every mode
        previous = int(recorded.get("watermark_ms", INITIAL_WATERMARK_MS))
        late = (recorded.get("watermark_ms") if base is not None and spec.mode == "event_time"
                else None)
        return cls(spec.mode, now_ms, watermark, None if late is None else int(late),
                   spec.watermark_delay_ms, True, previous)

    def record(self, stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """What the commit entry keeps: this batch's clocks and what the next batch needs."""
        stats = list(stats)
        newest = max((int(s["max_event_time_ms"]) for s in stats
                      if s.get("max_event_time_ms") is not None), default=None)
        timers = [int(s["next_timer_ms"]) for s in stats if s.get("next_timer_ms") is not None]
        entry: dict[str, Any] = {
            "mode": self.mode,
            "now_ms": self.now_ms,
            "next_timer_ms": min(timers, default=None),
            "late_rows": sum(int(s.get("late_rows", 0)) for s in stats),
            "timers_fired": sum(int(s.get("timers_fired", 0)) for s in stats),
        }
        if self.event_time:
            entry.update(watermark_ms=self.watermark_ms, late_threshold_ms=self.late_threshold_ms,
                         max_event_time_ms=newest, delay_ms=self.delay_ms,
                         next_watermark_ms=next_watermark_ms(self.watermark_ms, newest,
                                                             self.delay_ms))
        return entry
