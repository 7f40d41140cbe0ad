"""Processors written for PySpark's transformWithStateInPandas / transformWithState, the way a
PySpark user writes them (camelCase, schemas, TTL in milliseconds). They live here, not in test
modules, so executors import them by name. None of them knows which backend runs it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

# ---- running count ---------------------------------------------------------------------------


class RunningCountPandas(StatefulProcessor):
    """Running count per key; emits (key, count) for every key of the batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "count long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        previous = self.count.get()
        total = (previous[0] if previous else 0) + sum(len(frame) for frame in rows)
        self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "count": [total]})

    def close(self) -> None:
        pass


class RunningCountRows(StatefulProcessor):
    """The same count for transformWithState: Rows in, Rows out."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", StructType([StructField("count",
                                                                           LongType())]))

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        previous = self.count.get()
        total = (previous[0] if previous else 0) + sum(1 for _ in rows)
        self.count.update((total,))
        yield Row(user=key[0], count=total)

    def close(self) -> None:
        pass


# ---- list and map state ----------------------------------------------------------------------


class PagesPerUser(StatefulProcessor):
    """List state of every page seen and a map state page -> visits; emits the list length,
    the number of distinct pages and the visits of the batch's first page."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.seen = handle.getListState("seen", "page string")
        self.visits = handle.getMapState("visits", "page string", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows))
        pages = list(frame["page"])
        self.seen.appendList([(page,) for page in pages])
        for page in pages:
            current = self.visits.getValue((page,))
            self.visits.updateValue((page,), ((current[0] if current else 0) + 1,))
        first = self.visits.getValue((pages[0],))
        yield pd.DataFrame({"user": [key[0]], "seen": [len(list(self.seen.get()))],
                            "distinct": [len(list(self.visits.keys()))],
                            "first_visits": [first[0]],
                            "has_first": [self.visits.containsKey((pages[0],))]})

    def close(self) -> None:
        pass


class ListEditor(StatefulProcessor):
    """Each row's `op` edits a list state: append, put (replace), clear; emits the list."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.items = handle.getListState("items", "item string")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for frame in rows:
            for op, item in zip(frame["op"], frame["item"], strict=True):
                if op == "append":
                    self.items.appendValue((item,))
                elif op == "put":
                    self.items.put([(item,), (item + "!",)])
                elif op == "clear":
                    self.items.clear()
        items = [value[0] for value in self.items.get()]
        yield pd.DataFrame({"user": [key[0]], "items": [",".join(items)],
                            "exists": [self.items.exists()]})

    def close(self) -> None:
        pass


class MapEditor(StatefulProcessor):
    """Each row sets (or with n < 0 removes) one map entry; emits the sorted entries."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.entries = handle.getMapState("entries", "name string, version int", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for frame in rows:
            for name, n in zip(frame["item"], frame["n"], strict=True):
                if n < 0:
                    self.entries.removeKey((name, 1))
                else:
                    self.entries.updateValue((name, 1), (n,))
        entries = sorted(self.entries.iterator())
        values = sorted(value[0] for value in self.entries.values())
        yield pd.DataFrame({"user": [key[0]],
                            "entries": [";".join(f"{k[0]}/{k[1]}={v[0]}" for k, v in entries)],
                            "values": [",".join(str(v) for v in values)],
                            "exists": [self.entries.exists()]})

    def close(self) -> None:
        pass


# ---- typed state ----------------------------------------------------------------------------

TYPED_SCHEMA = StructType([
    StructField("ts", TimestampType()), StructField("ntz", TimestampNTZType()),
    StructField("day", DateType()), StructField("amount", DecimalType(12, 3)),
    StructField("raw", BinaryType()), StructField("flag", BooleanType()),
    StructField("small", IntegerType()), StructField("big", LongType()),
    StructField("ratio", DoubleType()), StructField("half", FloatType()),
    StructField("name", StringType())])

TYPED_VALUES = {
    "a": (dt.datetime(2024, 2, 29, 23, 59, 58, 123456), dt.datetime(1999, 12, 31, 12, 0, 1),
          dt.date(2024, 2, 29), Decimal("123456789.125"), b"\x00\xff", True, -7, 1 << 40,
          0.1, 0.5, "ä"),
    "b": (dt.datetime(1969, 7, 20, 20, 17, 40), dt.datetime(1970, 1, 1), dt.date(1900, 1, 1),
          Decimal("-0.001"), b"", False, 2147483647, -(1 << 63), -1e300, -2.25, ""),
}


class TypedStateRoundTrip(StatefulProcessor):
    """Stores TYPED_VALUES[key] in value, list and map state in the first batch a key is seen,
    and emits what it reads back (as repr) in every later batch."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.value = handle.getValueState("value", TYPED_SCHEMA)
        self.items = handle.getListState("items", TYPED_SCHEMA)
        self.by_day = handle.getMapState("by_day", "day date, ts timestamp", TYPED_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        stored = self.value.get()
        if stored is None:
            value = TYPED_VALUES[key[0]]
            self.value.update(value)
            self.items.put([value, value])
            self.by_day.updateValue((value[2], value[0]), value)
            return
        read = (stored, list(self.items.get()), list(self.by_day.iterator()))
        yield pd.DataFrame({"user": [key[0]], "read": [repr(read)]})

    def close(self) -> None:
        pass


# ---- keys ------------------------------------------------------------------------------------


class KeyProbe(StatefulProcessor):
    """Emits the repr of the key it is called with, for input rows and for its timer (one
    timer per key, due at once)."""

    def __init__(self, rows: bool = False) -> None:
        self.rows = rows

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def _emit(self, kind: str, key: Any) -> Any:
        text = repr(tuple(key))
        if self.rows:
            return Row(kind=kind, key=text)
        return pd.DataFrame({"kind": [kind], "key": [text]})

    def handleInputRows(self, key: Any, rows: Iterator[Any],
                        timerValues: TimerValues) -> Iterator[Any]:
        for _ in rows:
            pass
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs())
        yield self._emit("input", key)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:
        yield self._emit("timer", key)

    def close(self) -> None:
        pass


class RowProbe(StatefulProcessor):
    """transformWithState: emits the type and repr of each input Row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        for row in rows:
            yield Row(kind=type(row).__name__, row=repr(row))

    def close(self) -> None:
        pass


class FrameProbe(StatefulProcessor):
    """transformWithStateInPandas: emits each frame's dtypes and index."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for frame in rows:
            dtypes = ",".join(f"{name}:{dtype}" for name, dtype in frame.dtypes.items())
            yield pd.DataFrame({"dtypes": [dtypes], "index": [repr(list(frame.index))],
                                "first": [repr(frame.iloc[0].to_dict())]})

    def close(self) -> None:
        pass


# ---- timers ----------------------------------------------------------------------------------


class ProcessingTimeReminder(StatefulProcessor):
    """Registers a timer `delay_ms` after the batch's processing time (once per key) and one
    it deletes again; the timer emits (key, expiry, the processing time it fired at)."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        now = timerValues.getCurrentProcessingTimeInMs()
        if not list(self.handle.listTimers()):
            self.handle.registerTimer(now + self.delay_ms)
            self.handle.registerTimer(now + 2 * self.delay_ms)
            self.handle.deleteTimer(now + 2 * self.delay_ms)
        timers = list(self.handle.listTimers())
        yield pd.DataFrame({"user": [key[0]], "event": ["input"], "at_ms": [now],
                            "timers": [",".join(str(t) for t in timers)]})

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"user": [key[0]], "event": ["timer"],
                            "at_ms": [timerValues.getCurrentProcessingTimeInMs()],
                            "timers": [str(expiredTimerInfo.getExpiryTimeInMs())]})

    def close(self) -> None:
        pass


class EventTimeSessions(StatefulProcessor):
    """Sessions closed by an event-time timer `gap_ms` after the newest event of a key:
    emits (user, session_end_ms, events) when the watermark passes the end."""

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = gap_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.session = handle.getValueState("session", "last_ms long, events long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows))
        newest = int(frame["ts"].max().value // 1_000_000)
        last, events = self.session.get() or (newest, 0)
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        last = max(last, newest)
        self.session.update((last, events + len(frame)))
        self.handle.registerTimer(last + self.gap_ms)
        return iter(())

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        last, events = self.session.get()
        self.session.clear()
        yield pd.DataFrame({"user": [key[0]], "session_end_ms": [last + self.gap_ms],
                            "events": [events],
                            "fired_ms": [expiredTimerInfo.getExpiryTimeInMs()]})

    def close(self) -> None:
        pass


# ---- TTL -------------------------------------------------------------------------------------


class ExpiringValues(StatefulProcessor):
    """Two value states, one with a short and one with a long TTL (milliseconds); emits which
    of them still held a value when the key's rows arrived, then writes both."""

    def __init__(self, short_ms: int, long_ms: int) -> None:
        self.short_ms = short_ms
        self.long_ms = long_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.short = handle.getValueState("short", "n long", ttlDurationMs=self.short_ms)
        self.long = handle.getValueState("long", "n long", ttlDurationMs=self.long_ms)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        n = sum(len(frame) for frame in rows)
        yield pd.DataFrame({"user": [key[0]], "short": [self.short.exists()],
                            "long": [self.long.exists()]})
        self.short.update((n,))
        self.long.update((n,))

    def close(self) -> None:
        pass


# ---- initial state ---------------------------------------------------------------------------


class CountFromInitialPandas(StatefulProcessor):
    """Running count that starts from the initial state's `start` column; remembers the
    initial state's column names and emits them with the count."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "count long")
        self.seen = handle.getListState("initial_columns", "names string")

    def handleInitialState(self, key: Any, initialState: pd.DataFrame,
                           timerValues: TimerValues) -> None:
        self.count.update((int(initialState["start"].sum()),))
        self.seen.appendValue((",".join(initialState.columns),))

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        previous = self.count.get()
        total = (previous[0] if previous else 0) + sum(len(frame) for frame in rows)
        self.count.update((total,))
        columns = "|".join(value[0] for value in self.seen.get())
        yield pd.DataFrame({"user": [key[0]], "count": [total], "initial": [columns]})

    def close(self) -> None:
        pass


class CountFromInitialRows(StatefulProcessor):
    """The same for transformWithState: handleInitialState gets one Row at a time."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "count long")
        self.calls = handle.getValueState("initial_calls", "calls long")

    def handleInitialState(self, key: Any, initialState: Row,
                           timerValues: TimerValues) -> None:
        previous = self.count.get()
        self.count.update(((previous[0] if previous else 0) + initialState.start,))
        calls = self.calls.get()
        self.calls.update(((calls[0] if calls else 0) + 1,))

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        previous = self.count.get()
        total = (previous[0] if previous else 0) + sum(1 for _ in rows)
        self.count.update((total,))
        calls = self.calls.get()
        yield Row(user=key[0], count=total, initial_calls=calls[0] if calls else 0)

    def close(self) -> None:
        pass


# ---- deleteIfExists --------------------------------------------------------------------------


class DropsOldState(StatefulProcessor):
    """Writes an "old" value per key; with `drop`, init() calls deleteIfExists("old") first.
    Emits whether "old" existed when the key's rows arrived."""

    def __init__(self, drop: bool) -> None:
        self.drop = drop

    def init(self, handle: StatefulProcessorHandle) -> None:
        if self.drop:
            handle.deleteIfExists("old")
        self.old = handle.getValueState("old", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        existed = self.old.exists()
        if not self.drop:
            self.old.update((1,))
        yield pd.DataFrame({"user": [key[0]], "existed": [existed]})

    def close(self) -> None:
        pass


# ---- processors PySpark would refuse ---------------------------------------------------------


class DeclaresState(StatefulProcessor):
    """Declares one value state with the given schema and TTL; emits nothing."""

    def __init__(self, schema: Any, ttl_ms: Any = None) -> None:
        self.schema = schema
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("tally", self.schema, ttlDurationMs=self.ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        return iter(())

    def close(self) -> None:
        pass


class StoresWrongType(StatefulProcessor):
    """Stores a string in a long field."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("tally", "n long, label string")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        self.state.update(("many", "label"))
        return iter(())

    def close(self) -> None:
        pass


class RegistersTimer(StatefulProcessor):
    """Registers a timer for every key."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + 1000)
        return iter(())

    def close(self) -> None:
        pass


class EchoTimestamps(StatefulProcessor):
    """transformWithStateInPandas: yields its input frames' (user, ts) unchanged."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for frame in rows:
            yield frame[["user", "ts"]]

    def close(self) -> None:
        pass


class TimerValuesProbe(StatefulProcessor):
    """Emits the TimerValues its handleInputRows gets."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for _ in rows:
            pass
        yield pd.DataFrame({"processing_ms": [timerValues.getCurrentProcessingTimeInMs()],
                            "watermark_ms": [timerValues.getCurrentWatermarkInMs()]})

    def close(self) -> None:
        pass


# ---- what PySpark's own test module relies on --------------------------------------------------


class UsesDeletedState(StatefulProcessor):
    """Deletes a variable in init() and reports what using it afterwards raises."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.temp = handle.getValueState("temp", "v long")
        handle.deleteIfExists("temp")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        from pyspark.errors import PySparkRuntimeError

        for _ in rows:
            pass
        try:
            self.temp.exists()
            raised = "nothing"
        except PySparkRuntimeError as error:
            raised = str(error).splitlines()[0]
        yield pd.DataFrame({"user": [key[0]], "raised": [raised]})

    def close(self) -> None:
        pass


class CountsFrames(StatefulProcessor):
    """Emits how many frames the rows of a key arrived in."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"user": [key[0]], "frames": [sum(1 for _ in rows)]})

    def close(self) -> None:
        pass


class BareStringMapKey(StatefulProcessor):
    """Uses a bare string as a one-field map key, as PySpark allows (it takes tuple(key))."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.seen = handle.getMapState("seen", "page string", "n long")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        for frame in rows:
            for page in frame["page"]:
                known = self.seen.getValue(page) if self.seen.containsKey(page) else None
                self.seen.updateValue(page, ((known[0] if known else 0) + 1,))
        yield pd.DataFrame({"user": [key[0]], "pages": [sum(1 for _ in self.seen.keys())]})  # noqa: SIM118

    def close(self) -> None:
        pass


class MinEventTime(StatefulProcessor):
    """Emits the smallest event time of a key's rows in each batch (epoch seconds)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        smallest = min(int(frame["ts"].min().timestamp()) for frame in rows)
        yield pd.DataFrame({"user": [key[0]], "smallest": [smallest]})

    def close(self) -> None:
        pass


NOT_NULL_INNER = StructType([StructField("id", IntegerType(), False),
                             StructField("name", StringType(), False)])
NESTED_NOT_NULL_OUTPUT = StructType([StructField("user", StringType(), True),
                                     StructField("value", NOT_NULL_INNER, True)])


class NestedNotNullOutput(StatefulProcessor):
    """transformWithState: outputs a struct whose fields are declared non-null."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row],
                        timerValues: TimerValues) -> Iterator[Row]:
        count = sum(1 for _ in rows)
        yield Row(user=key[0], value=Row(id=count, name=f"n{count}"))

    def close(self) -> None:
        pass
