"""The scenarios of tests/spark/pyspark_api/test_compare_pyspark.py: a processor from
tests/support/tws_processors.py, its input (one frame per micro-batch) and how the query is set up.

The inputs are small and written by hand so that each batch exercises something named in its
comment: late rows, a timer exactly at the watermark, timers of keys without rows, a no-data
batch after the last file, and so on. Event times are seconds after BASE.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tests.support import tws_processors as tp

BASE = pd.Timestamp("2024-05-01 12:00:00")


def at(seconds: float) -> pd.Timestamp:
    return BASE + pd.Timedelta(seconds=seconds)


@dataclass(frozen=True)
class Scenario:
    """One comparison: `batches[i]` is the input file of micro-batch i (or, with `pauses`, of
    step i, started `pauses[i]` seconds after the previous step's query ended)."""

    name: str
    processor: type
    input_schema: str
    batches: tuple[pd.DataFrame, ...]
    keys: tuple[str, ...] = ("user",)
    time_mode: str = "None"  # PySpark's spelling: None, ProcessingTime, EventTime
    watermark: tuple[str, str] | None = None  # (column, delay) for DataFrame.withWatermark
    initial_state: pd.DataFrame | None = None
    initial_schema: str | None = None
    row_api: bool = False  # transformWithState (Rows) instead of transformWithStateInPandas
    pauses: tuple[float, ...] | None = None  # processing time: run step by step

    @property
    def output_schema(self) -> str:
        return str(self.processor.OUTPUT)


def _values(*pairs: tuple[str, int]) -> pd.DataFrame:
    return pd.DataFrame({"user": [p[0] for p in pairs],
                         "v": pd.array([p[1] for p in pairs], dtype="int64")})


def _events(*pairs: tuple[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"user": [p[0] for p in pairs], "ts": [at(p[1]) for p in pairs]})


RUNNING_COUNT = Scenario(
    "running_count", tp.RunningCountProcessor, "user string, v long",
    (_values(("a", 1), ("b", 2), ("a", 3)),
     _values(("b", 4), ("c", 5)),
     _values(("a", -1), ("c", 6), ("c", 7)),  # a resets: its state is cleared
     _values(("a", 8), ("b", 9))))

LIST_STATE = Scenario(
    "list_state", tp.RecentValuesProcessor, "user string, v long",
    (_values(("a", 3), ("a", 1), ("b", 2)),
     _values(("a", 5), ("a", 4), ("a", 6), ("b", 7)),  # a: more than four, put() trims
     _values(("a", 0), ("c", 9)),  # a: cleared
     _values(("a", 10), ("b", 8), ("b", 11), ("b", 12))))

MAP_STATE = Scenario(
    "map_state", tp.ItemCountsProcessor, "user string, item string",
    (pd.DataFrame({"user": ["a", "a", "a", "b"], "item": ["apple", "apple", "pear", "fig"]}),
     pd.DataFrame({"user": ["a", "a", "b"], "item": ["-apple", "kiwi", "fig"]}),
     pd.DataFrame({"user": ["b", "a"], "item": ["*", "pear"]}),  # b: cleared
     pd.DataFrame({"user": ["b", "c"], "item": ["plum", "-none"]})))

INITIAL_STATE = Scenario(
    "initial_state", tp.InitialCountProcessor, "user string, v long",
    (_values(("a", 1), ("c", 2)),  # b is only in the initial state: no output yet
     _values(("b", 3), ("c", 4)),
     _values(("a", 5))),
    initial_state=pd.DataFrame({"user": ["a", "b"], "count": pd.array([10, 20], dtype="int64")}),
    initial_schema="user string, count long")

TOP_K = Scenario(
    "top_k_rows", tp.TopKProcessor, "user string, v long",
    (_values(("a", 5), ("a", 1), ("a", 9), ("b", 3)),
     _values(("a", 7), ("a", 9), ("a", 2), ("b", 10), ("b", 1), ("b", 4), ("b", 6)),
     _values(("a", 100), ("c", 1))),
    row_api=True)

TTL = Scenario(
    "ttl", tp.TtlProcessor, "user string, v long",
    (_values(("a", 1), ("a", 2), ("b", 3)),
     _values(("a", 4), ("c", 5)),  # a's short-lived state expired, the lasting one not
     _values(("b", 6), ("c", 7))),
    time_mode="ProcessingTime", pauses=(0.0, 1.5, 1.5))


def _timeouts(*triples: tuple[str, int, int]) -> pd.DataFrame:
    return pd.DataFrame({"user": [t[0] for t in triples],
                         "v": pd.array([t[1] for t in triples], dtype="int64"),
                         "timeout_ms": pd.array([t[2] for t in triples], dtype="int64")})


PROCESSING_TIMERS = Scenario(
    "processing_time_timers", tp.InactivityTimeoutProcessor,
    "user string, v long, timeout_ms long",
    (_timeouts(("a", 1, tp.SHORT_MS), ("b", 2, tp.LONG_MS), ("c", 3, tp.SHORT_MS)),
     # a and c time out (keys without rows); b's long timer is replaced by a short one
     _timeouts(("b", 4, tp.SHORT_MS), ("d", 5, tp.LONG_MS)),
     _timeouts(("e", 6, tp.LONG_MS))),  # b times out; d and e stay pending
    time_mode="ProcessingTime", pauses=(0.0, 1.5, 1.5))

# Watermark delay 5 s; the timer of a key sits 3 s after its newest event.
EVENT_TIMERS = Scenario(
    "event_time_timers", tp.EventTimeoutProcessor, "user string, ts timestamp",
    (_events(("a", 10), ("b", 12), ("c", 20)),  # watermark 0; next 15
     # watermark 15: b's timer at 15 fires (at the watermark); a's 13 is replaced before
     _events(("a", 11), ("d", 30)),
     # watermark 25, late below 15: b@14 is late and dropped; c's 23 fires; a's is replaced
     _events(("b", 14), ("a", 26), ("e", 24)),
     _events(("f", 40))),  # watermark still 25; the next batch has no data and watermark 35
    time_mode="EventTime", watermark=("ts", "5 seconds"))

SESSION_WINDOWS = Scenario(
    "session_windows", tp.SessionWindowProcessor, "user string, ts timestamp",
    (_events(("a", 0), ("a", 4), ("b", 2)),
     _events(("a", 30), ("b", 8), ("c", 20)),  # a: a gap closes [0, 4]
     _events(("c", 27), ("a", 33)),  # watermark 25: b's session times out
     _events(("d", 50))),  # no-data batch next: a's and c's sessions time out, d stays open
    time_mode="EventTime", watermark=("ts", "5 seconds"))


def _dedup(*triples: tuple[str, int, float]) -> pd.DataFrame:
    return pd.DataFrame({"user": [t[0] for t in triples],
                         "event_id": pd.array([t[1] for t in triples], dtype="int64"),
                         "ts": [at(t[2]) for t in triples]})


DEDUP = Scenario(
    "dedup_with_expiry", tp.DedupProcessor, "user string, event_id long, ts timestamp",
    (_dedup(("a", 1, 1), ("a", 1, 2), ("a", 2, 3), ("b", 1, 3)),  # a/1 twice in one batch
     _dedup(("a", 1, 5), ("b", 2, 20)),  # a/1 again: dropped
     # watermark 15: rows come before timers, so a/1 and b/1 are still known, then expire
     _dedup(("a", 1, 16), ("b", 1, 17), ("c", 1, 18)),
     _dedup(("a", 1, 19), ("d", 1, 40))),  # a/1 was forgotten: first again
    keys=("user", "event_id"), time_mode="EventTime", watermark=("ts", "5 seconds"))

TIMER_BOOKKEEPING = Scenario(
    "timer_registered_and_deleted", tp.TimerBookkeepingProcessor, "user string, ts timestamp",
    (_events(("a", 10), ("b", 20)),
     _events(("c", 30)),  # watermark 15: a's timer fires and lists itself
     _events(("a", 26)),  # watermark 25: b's fires
     _events(("d", 50))),  # no-data batch next, watermark 45
    time_mode="EventTime", watermark=("ts", "5 seconds"))

def _stamped(*triples: tuple[str, int, float | None]) -> pd.DataFrame:
    return pd.DataFrame({"user": [t[0] for t in triples],
                         "v": pd.array([t[1] for t in triples], dtype="int64"),
                         "ts": [None if t[2] is None else at(t[2]) for t in triples]})


# Rows are late at or before the previous batch's watermark; a null event time is never late.
LATE_ROWS = Scenario(
    "late_and_null_event_times", tp.RunningCountProcessor, "user string, v long, ts timestamp",
    (_stamped(("a", 1, 10), ("b", 2, None)),  # watermark 0; next 5
     _stamped(("a", 3, None), ("b", 4, 20)),  # late below 0: nothing; next 15
     # late at or before 5: d (exactly 5) and f; e (1 ms after) stays; a's null stays
     _stamped(("d", 5, 5), ("e", 6, 5.001), ("a", 7, None), ("f", 8, 4)),
     _stamped(("g", 9, 15), ("h", 10, 15.5), ("b", 11, None))),  # late at or before 15: g
    time_mode="EventTime", watermark=("ts", "5 seconds"))

TIMER_AT_WATERMARK = Scenario(
    "timer_at_the_watermark", tp.LateTimerProcessor, "user string, ts timestamp",
    (_events(("a", 10)),
     # watermark 5: b registers a timer at 5 and it fires; a's fires and re-arms, already due
     _events(("b", 12)),
     _events(("c", 30))),  # watermark 7: a's re-armed timer fires
    time_mode="EventTime", watermark=("ts", "5 seconds"))

SCENARIOS = {s.name: s for s in (RUNNING_COUNT, LIST_STATE, MAP_STATE, INITIAL_STATE, TOP_K,
                                  TTL, PROCESSING_TIMERS, EVENT_TIMERS, SESSION_WINDOWS, DEDUP,
                                  TIMER_BOOKKEEPING, TIMER_AT_WATERMARK,
                                  LATE_ROWS)}
