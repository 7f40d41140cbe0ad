"""The clocks of a batch as Spark computes them, late rows, and what asks for a tick batch."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_dstl.backend.lineage.commit_entry import CommitEntry
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.time.clock import BatchClock, TimeSpec
from pyspark_dstl.spark.time.modes import time_mode_of
from pyspark_dstl.spark.time.ticks import TickDemand, read_demand, write_demand
from pyspark_dstl.spark.time.watermark import (
    drop_late_rows,
    max_event_time_ms,
    next_watermark_ms,
)

EVENT = TimeSpec("event_time", "ts", 10_000)


def stamps(*millis: int | None) -> pa.Table:
    values = [None if m is None else dt.datetime.fromtimestamp(m / 1000, dt.UTC)
              for m in millis]
    return pa.table({"ts": pa.array(values, pa.timestamp("us", tz="UTC"))})


def entry_with(time: dict[str, object]) -> CommitEntry:
    return CommitEntry(0, {}, extra={"time": time})


def test_first_batch_has_watermark_zero_and_no_late_rows() -> None:
    clock = BatchClock.for_batch(EVENT, None, now_ms=5)
    assert (clock.watermark_ms, clock.late_threshold_ms) == (0, None)


def test_next_batch_uses_the_recorded_watermark_and_the_previous_one_for_late_rows() -> None:
    first = BatchClock.for_batch(EVENT, None, now_ms=5)
    recorded = first.record([{"max_event_time_ms": 25_000}, {"max_event_time_ms": 40_000}])
    assert recorded["next_watermark_ms"] == 30_000
    second = BatchClock.for_batch(EVENT, entry_with(recorded), now_ms=6)
    assert (second.watermark_ms, second.late_threshold_ms) == (30_000, 0)


def test_watermark_never_moves_back() -> None:
    assert next_watermark_ms(30_000, 12_000, 10_000) == 30_000
    assert next_watermark_ms(30_000, None, 10_000) == 30_000


def test_newest_event_time_is_floored_to_milliseconds() -> None:
    table = pa.table({"ts": pa.array([1_999, 5_000_999], pa.timestamp("us"))})
    assert max_event_time_ms(table, "ts") == 5_000


def test_rows_at_or_before_the_threshold_are_late_and_null_event_times_are_kept() -> None:
    kept, dropped = drop_late_rows(stamps(999, 1000, 1001, None), "ts", 1000)
    assert kept.column("ts").to_pylist() == [dt.datetime.fromtimestamp(1.001, dt.UTC), None]
    assert dropped == 2


def test_processing_time_clock_has_no_watermark() -> None:
    clock = BatchClock.for_batch(TimeSpec("processing_time"), None, now_ms=7)
    assert (clock.watermark_ms, clock.late_threshold_ms) == (-1, None)
    assert "next_watermark_ms" not in clock.record([{"next_timer_ms": 9}])


@pytest.mark.parametrize("word,mode", [("EventTime", "event_time"),
                                       ("processing_time", "processing_time"),
                                       ("None", "none")])
def test_time_modes_accept_pyspark_spellings(word: str, mode: str) -> None:
    assert time_mode_of(word) == mode


def test_unknown_time_mode_names_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"^time_mode"):
        time_mode_of("wallclock")


def test_event_time_mode_needs_a_column() -> None:
    with pytest.raises(ConfigError, match="event-time column"):
        TimeSpec("event_time")


def test_tick_is_wanted_when_the_watermark_advanced() -> None:
    demand = TickDemand.from_commit(4, {"mode": "event_time", "watermark_ms": 0,
                                        "next_watermark_ms": 10, "next_timer_ms": 99})
    assert demand.wants_batch(now_ms=0)


def test_processing_time_tick_waits_for_the_earliest_timer() -> None:
    demand = TickDemand.from_commit(4, {"mode": "processing_time", "next_timer_ms": 100})
    assert not demand.wants_batch(now_ms=99)
    assert demand.wants_batch(now_ms=100)


def test_available_now_ignores_timers_due_after_the_query_started() -> None:
    demand = TickDemand.from_commit(4, {"mode": "processing_time", "next_timer_ms": 100})
    assert not demand.wants_batch(now_ms=500, timers_due_by_ms=99)


def test_no_time_no_tick() -> None:
    assert not TickDemand.from_commit(3, None).wants_batch(now_ms=10**15)


def test_demand_file_round_trips_and_a_missing_one_reads_as_none(tmp_path: Path) -> None:
    path = str(tmp_path / "ticks" / "d.json")
    assert read_demand(path) is None
    write_demand(path, TickDemand(7, 123, True))
    assert read_demand(path) == TickDemand(7, 123, True)
