"""Processors written against PySpark's own StatefulProcessor API (camelCase, state schemas,
TTL in milliseconds, TimerValues, ExpiredTimerInfo), one per scenario of
tests/spark/pyspark_api/test_compare_pyspark.py.

Each runs unchanged through PySpark's transformWithStateInPandas (or transformWithState for the
Row-based ones) and through this project's compatibility entry point, and the two outputs are
compared batch by batch. They live here, not in a test module, because executors import them
by module name.

Rules that keep the outputs comparable: rows of one key are put in a deterministic order
(sorted by a column) before they are used, and no output carries the wall clock; processing
time shows up only as "did this timer or TTL expire", with delays either far shorter than the
pauses between the test's steps or far longer than a test run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import LongType, StructField, StructType

SHORT_MS = 1_000  # expires (TTL, processing-time timer) before the test's next step
LONG_MS = 3_600_000  # never expires within a test run


def _frame(rows: Iterator[pd.DataFrame]) -> pd.DataFrame:
    """A key's rows of the batch as one frame (the engines may split them differently)."""
    frames = list(rows)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _millis(column: pd.Series) -> list[int]:
    """Timestamps as epoch milliseconds (floored, as Spark's watermark arithmetic)."""
    return [int(value.value // 1_000_000) for value in pd.to_datetime(column)]


def _stamp(millis: int) -> pd.Timestamp:
    return pd.Timestamp(millis, unit="ms")


class _Processor(StatefulProcessor):
    """Keeps the handle; PySpark's base declares close() without a body."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def close(self) -> None:
        pass

    def _clear_timers(self) -> None:
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)


# --- state kinds without time --------------------------------------------------------------


class RunningCountProcessor(_Processor):
    """Value state: a running count per key; a negative value resets the key's count."""

    OUTPUT = "user string, count long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        frame = _frame(rows)
        if (frame["v"] < 0).any():
            self.count.clear()
            yield pd.DataFrame({"user": [key[0]], "count": [0]})
            return
        before = self.count.get()[0] if self.count.exists() else 0
        self.count.update((before + len(frame),))
        yield pd.DataFrame({"user": [key[0]], "count": [before + len(frame)]})


class RecentValuesProcessor(_Processor):
    """List state: each key's last four values (sorted within a batch); a zero empties it."""

    OUTPUT = "user string, size long, recent string"
    KEEP = 4

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.recent = handle.getListState("recent", StructType([StructField("v", LongType())]))

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        values = sorted(int(v) for v in _frame(rows)["v"])
        if 0 in values:
            self.recent.clear()
            kept: list[int] = []
        else:
            kept = [row[0] for row in self.recent.get()] if self.recent.exists() else []
            kept += values
            if len(kept) > self.KEEP:
                kept = kept[-self.KEEP:]
                self.recent.put([(v,) for v in kept])
            elif len(values) == 1:
                self.recent.appendValue((values[0],))
            else:
                self.recent.appendList([(v,) for v in values])
        yield pd.DataFrame({"user": [key[0]], "size": [len(kept)],
                            "recent": [",".join(str(v) for v in kept)]})


class ItemCountsProcessor(_Processor):
    """Map state: per key, how often each item was seen. "-x" removes item x, "*" empties the
    map; the output is the whole map after the batch (one row per item, or one empty row)."""

    OUTPUT = "user string, item string, count long, items long, total long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.items = handle.getMapState("items", "item string", "count long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        for item in sorted(_frame(rows)["item"]):
            if item == "*":
                self.items.clear()
            elif item.startswith("-"):
                self.items.removeKey((item[1:],))
            elif self.items.containsKey((item,)):
                self.items.updateValue((item,), (self.items.getValue((item,))[0] + 1,))
            else:
                self.items.updateValue((item,), (1,))
        entries = [(k[0], v[0]) for k, v in self.items.iterator()] if self.items.exists() else []
        names = [k[0] for k in self.items.keys()] if entries else []  # noqa: SIM118 (API)
        total = sum(v[0] for v in self.items.values()) if entries else 0
        if not entries:
            yield pd.DataFrame({"user": [key[0]], "item": [""], "count": [0], "items": [0],
                                "total": [0]})
            return
        yield pd.DataFrame({"user": [key[0]] * len(entries), "item": [e[0] for e in entries],
                            "count": [e[1] for e in entries], "items": [len(names)] * len(entries),
                            "total": [total] * len(entries)})


class InitialCountProcessor(_Processor):
    """A running count that starts from an initial state DataFrame (user, count)."""

    OUTPUT = "user string, count long, seeded boolean"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.count = handle.getValueState("count", "count long")
        self.seeded = handle.getValueState("seeded", "seeded boolean")

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:
        before = self.count.get()[0] if self.count.exists() else 0
        self.count.update((before + int(initialState["count"].sum()),))
        self.seeded.update((True,))

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        total = (self.count.get()[0] if self.count.exists() else 0) + len(_frame(rows))
        self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "count": [total],
                            "seeded": [self.seeded.exists()]})


class TopKProcessor(_Processor):
    """Row-based (transformWithState): each key's three largest distinct values in list state,
    emitted with their rank after every batch."""

    OUTPUT = "user string, rank long, v long"
    K = 3

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.top = handle.getListState("top", "v long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        values = {int(row.v) for row in rows}
        values.update(row[0] for row in self.top.get())
        best = sorted(values, reverse=True)[: self.K]
        self.top.put([(v,) for v in best])
        for rank, value in enumerate(best, start=1):
            yield Row(user=key[0], rank=rank, v=value)


# --- processing time: TTL and timers --------------------------------------------------------


class TtlProcessor(_Processor):
    """TTL on all three state kinds: what each variable still held before this batch.

    "brief" (value, list and map) lives SHORT_MS, "lasting" LONG_MS; every batch rewrites all
    of them, which also restarts their TTL.
    """

    OUTPUT = "user string, brief long, lasting long, history long, tags long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.brief = handle.getValueState("brief", "count long", SHORT_MS)
        self.lasting = handle.getValueState("lasting", "count long", LONG_MS)
        self.history = handle.getListState("history", "v long", SHORT_MS)
        self.tags = handle.getMapState("tags", "tag string", "v long", SHORT_MS)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        values = sorted(int(v) for v in _frame(rows)["v"])
        brief, lasting = self.brief.get(), self.lasting.get()
        history = len(list(self.history.get()))
        tags = len(list(self.tags.keys()))
        total = (lasting[0] if lasting is not None else 0) + len(values)
        self.brief.update((total,))
        self.lasting.update((total,))
        self.history.appendList([(v,) for v in values])
        for v in values:
            self.tags.updateValue((f"t{v}",), (v,))
        yield pd.DataFrame({"user": [key[0]], "brief": [-1 if brief is None else brief[0]],
                            "lasting": [-1 if lasting is None else lasting[0]],
                            "history": [history], "tags": [tags]})


class InactivityTimeoutProcessor(_Processor):
    """Processing-time timers: every batch of a key replaces its timer with one `timeout_ms`
    after the batch's processing time; when it fires, the count is emitted and forgotten."""

    OUTPUT = "user string, count long, kind string, watermark long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        frame = _frame(rows)
        total = (self.count.get()[0] if self.count.exists() else 0) + len(frame)
        self.count.update((total,))
        self._clear_timers()
        now = timerValues.getCurrentProcessingTimeInMs()
        self.handle.registerTimer(now + int(frame["timeout_ms"].max()))
        yield pd.DataFrame({"user": [key[0]], "count": [total], "kind": ["input"],
                            "watermark": [timerValues.getCurrentWatermarkInMs()]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        count = self.count.get()[0] if self.count.exists() else 0
        self.count.clear()
        yield pd.DataFrame({"user": [key[0]], "count": [count], "kind": ["timeout"],
                            "watermark": [timerValues.getCurrentWatermarkInMs()]})


# --- event time: timers against the watermark -----------------------------------------------


class EventTimeoutProcessor(_Processor):
    """Event-time timers: a key's timer sits 3 s after the newest event time it has seen (never
    at or before the watermark); the output shows the watermark each call saw."""

    OUTPUT = "user string, count long, newest_ms long, watermark long, kind string, clock boolean"
    AFTER_MS = 3_000

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.count = handle.getValueState("count", "count long")
        self.newest = handle.getValueState("newest", "ms long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        stamps = _millis(_frame(rows)["ts"])
        total = (self.count.get()[0] if self.count.exists() else 0) + len(stamps)
        newest = max([*stamps, *(self.newest.get() or ())])
        self.count.update((total,))
        self.newest.update((newest,))
        self._clear_timers()
        watermark = timerValues.getCurrentWatermarkInMs()
        self.handle.registerTimer(max(newest + self.AFTER_MS, watermark + 1))
        yield pd.DataFrame({"user": [key[0]], "count": [total], "newest_ms": [newest],
                            "watermark": [watermark], "kind": ["input"],
                            "clock": [timerValues.getCurrentProcessingTimeInMs() > 0]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        count = self.count.get()[0] if self.count.exists() else 0
        yield pd.DataFrame({"user": [key[0]], "count": [count],
                            "newest_ms": [expiredTimerInfo.getExpiryTimeInMs()],
                            "watermark": [timerValues.getCurrentWatermarkInMs()],
                            "kind": ["fired"],
                            "clock": [timerValues.getCurrentProcessingTimeInMs() > 0]})


class SessionWindowProcessor(_Processor):
    """Session windows by event time: a session closes after GAP_MS without events, when the
    watermark passes its end plus the gap, or when an event comes after that gap."""

    OUTPUT = ("user string, session_start timestamp, session_end timestamp, events long, "
              "reason string")
    GAP_MS = 10_000

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.session = handle.getValueState("session", "start_ms long, end_ms long, events long")

    def _row(self, key: Any, session: tuple[int, int, int], reason: str) -> pd.DataFrame:
        return pd.DataFrame({"user": [key[0]], "session_start": [_stamp(session[0])],
                             "session_end": [_stamp(session[1])], "events": [session[2]],
                             "reason": [reason]})

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        current = self.session.get()
        session = None if current is None else (current[0], current[1], current[2])
        for stamp in sorted(_millis(_frame(rows)["ts"])):
            if session is not None and stamp - session[1] > self.GAP_MS:
                yield self._row(key, session, "gap")
                session = None
            if session is None:
                session = (stamp, stamp, 1)
            else:
                session = (min(session[0], stamp), max(session[1], stamp), session[2] + 1)
        assert session is not None
        self.session.update(session)
        self._clear_timers()
        watermark = timerValues.getCurrentWatermarkInMs()
        self.handle.registerTimer(max(session[1] + self.GAP_MS, watermark + 1))

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        current = self.session.get()
        if current is not None:
            self.session.clear()
            yield self._row(key, (current[0], current[1], current[2]), "timeout")


class DedupProcessor(_Processor):
    """Dedup with expiry, keyed by (user, event_id): the first row of an id is emitted, later
    copies are dropped until RETENTION_MS of event time after it, then the id is forgotten."""

    OUTPUT = "user string, event_id long, event_time timestamp, kind string"
    RETENTION_MS = 10_000

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.first = handle.getValueState("first", StructType([StructField("ms", LongType())]))

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        if self.first.exists():
            return
        first = min(_millis(_frame(rows)["ts"]))
        self.first.update((first,))
        watermark = timerValues.getCurrentWatermarkInMs()
        self.handle.registerTimer(max(first + self.RETENTION_MS, watermark + 1))
        yield pd.DataFrame({"user": [key[0]], "event_id": [key[1]],
                            "event_time": [_stamp(first)], "kind": ["first"]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        self.first.clear()
        yield pd.DataFrame({"user": [key[0]], "event_id": [key[1]],
                            "event_time": [_stamp(expiredTimerInfo.getExpiryTimeInMs())],
                            "kind": ["expired"]})


class TimerBookkeepingProcessor(_Processor):
    """Timers registered and deleted in the same call never fire: each batch registers timers
    at +1 s, +2 s and +3 s after the key's newest event and deletes the +1 s and +3 s ones;
    each fired timer registers and deletes one more. Outputs list the key's timers."""

    OUTPUT = "user string, kind string, at_ms long, timers string"

    def _listed(self) -> str:
        return ",".join(str(t) for t in sorted(self.handle.listTimers()))

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        newest = max(_millis(_frame(rows)["ts"]))
        base = max(newest, timerValues.getCurrentWatermarkInMs())
        for offset in (1_000, 2_000, 3_000):
            self.handle.registerTimer(base + offset)
        self.handle.deleteTimer(base + 1_000)
        self.handle.deleteTimer(base + 3_000)
        yield pd.DataFrame({"user": [key[0]], "kind": ["input"], "at_ms": [base],
                            "timers": [self._listed()]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        self.handle.registerTimer(expiry + 60_000)
        self.handle.deleteTimer(expiry + 60_000)
        yield pd.DataFrame({"user": [key[0]], "kind": ["fired"], "at_ms": [expiry],
                            "timers": [self._listed()]})


class LateTimerProcessor(_Processor):
    """Registers a timer at the watermark itself (not after it), as a processor that computes
    expiries from old events may; PySpark accepts it and fires it in the same batch. A fired
    timer is re-armed once at expiry + 1 ms when that is already due: PySpark fires the new
    one in the next batch, not in the one that is firing timers."""

    OUTPUT = "user string, kind string, at_ms long"

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.rearmed = handle.getValueState("rearmed", "done boolean")

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Any:
        watermark = timerValues.getCurrentWatermarkInMs()
        newest = max(_millis(_frame(rows)["ts"]))
        self.handle.registerTimer(max(watermark, 1))
        yield pd.DataFrame({"user": [key[0]], "kind": ["input"], "at_ms": [newest]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        if expiry + 1 <= timerValues.getCurrentWatermarkInMs() and not self.rearmed.exists():
            self.rearmed.update((True,))
            self.handle.registerTimer(expiry + 1)
        yield pd.DataFrame({"user": [key[0]], "kind": ["fired"], "at_ms": [expiry]})


# --- failures ------------------------------------------------------------------------------


class _FailsOnce:
    """Fails the first attempt of a task; each injected failure leaves a file in
    `marker_dir` (named by batch and partition) so a test can see that it happened."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = marker_dir

    def fail_first_attempt(self, where: str) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None or context.attemptNumber() != 0:
            return
        batch = context.getLocalProperty("streaming.sql.batchId")
        marker = os.path.join(self.marker_dir, f"batch-{batch}-partition-"
                                               f"{context.partitionId()}-{where}")
        with open(marker, "w", encoding="utf-8"):
            pass
        raise RuntimeError(f"injected failure {where} (attempt 0)")


class FailingTimeoutProcessor(EventTimeoutProcessor):
    """EventTimeoutProcessor whose first task attempt fails while a timer fires (after the
    input rows and earlier timers were handled): the retry must give the same output and
    state as a run without failures."""

    def __init__(self, marker_dir: str) -> None:
        self.failure = _FailsOnce(marker_dir)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        yield from super().handleExpiredTimer(key, timerValues, expiredTimerInfo)
        self.failure.fail_first_attempt("in-timer")


class FailAfterTimersProcessor(EventTimeoutProcessor):
    """EventTimeoutProcessor whose first task attempt fails in close(), after its timers fired
    and its state was committed: the retry must start again from the previous batch's state."""

    def __init__(self, marker_dir: str) -> None:
        self.failure = _FailsOnce(marker_dir)

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.fired = 0

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Any:
        self.fired += 1
        yield from super().handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def close(self) -> None:
        if self.fired:
            self.failure.fail_first_attempt("in-close")


__all__ = [
    "LONG_MS",
    "SHORT_MS",
    "DedupProcessor",
    "EventTimeoutProcessor",
    "FailAfterTimersProcessor",
    "FailingTimeoutProcessor",
    "InactivityTimeoutProcessor",
    "InitialCountProcessor",
    "ItemCountsProcessor",
    "LateTimerProcessor",
    "RecentValuesProcessor",
    "RunningCountProcessor",
    "SessionWindowProcessor",
    "TimerBookkeepingProcessor",
    "TopKProcessor",
    "TtlProcessor",
]
