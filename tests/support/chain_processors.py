"""PySpark processors that start a chain in the tests (they live here so executors import them
by name). Each names its output's event-time column `at`.

- `Relay` / `RelayRows`: one output row per input row, `at` = the row's event time (pandas and
  Row APIs).
- `RelayWithCloser`: the same, and per key an event-time timer 5 s after the key's newest row;
  when it fires, one "closed" row at the timer's time with the number of rows seen (rows made
  in the very batch a chained step reads, as Spark's chain tests rely on).
- `Tally`: a second transformWithState: per call one "seen" row at the newest `at` of the call;
  per key a timer 10 s after it, firing a "total" row with the count and sum.
- `TallyRows`: `Tally` in the Row API (transformWithState).
- `Backdated`: emits its rows one minute before their event time (older than the watermark
  for late events once it passed them: Spark refuses such rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import LongType, StructField, StructType

RELAY_SCHEMA = "k string, v long, at timestamp, tag string"
TALLY_SCHEMA = "k string, n long, total long, at timestamp, tag string"
CLOSER_GAP_MS = 5000
TALLY_GAP_MS = 10000
_SEEN = StructType([StructField("rows", LongType()), StructField("newest", LongType())])
_TALLY = StructType([StructField("n", LongType()), StructField("total", LongType()),
                     StructField("newest", LongType())])


def _millis(times: pd.Series) -> list[int]:
    return [int(value) for value in (times.astype("int64") // 1_000_000).tolist()]


def _stamp(ms: int) -> pd.Timestamp:
    return pd.Timestamp(ms, unit="ms")


class Relay(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        for frame in rows:
            yield pd.DataFrame({"k": frame["k"], "v": frame["v"].astype("int64"),
                                "at": frame["ts"], "tag": "relay"})


class RelayRows(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            yield Row(k=row.k, v=int(row.v), at=row.ts, tag="relay")


class RelayWithCloser(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.seen = handle.getValueState("seen", _SEEN)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        count, newest = self.seen.get() if self.seen.exists() else (0, None)
        for frame in rows:
            count += len(frame)
            times = _millis(frame["ts"])
            newest = max([*times, *([newest] if newest is not None else [])])
            yield pd.DataFrame({"k": frame["k"], "v": frame["v"].astype("int64"),
                                "at": frame["ts"], "tag": "relay"})
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(newest + CLOSER_GAP_MS)
        self.seen.update((count, newest))

    def handleExpiredTimer(self, key: Any, timerValues: Any,
                           expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        count, _ = self.seen.get()
        self.seen.clear()
        at = expiredTimerInfo.getExpiryTimeInMs()
        yield pd.DataFrame({"k": [key[0]], "v": [count], "at": [_stamp(at)], "tag": ["closed"]})


class Tally(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.tally = handle.getValueState("tally", _TALLY)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        n, total, newest = self.tally.get() if self.tally.exists() else (0, 0, None)
        called = 0
        for frame in rows:
            n += len(frame)
            called += len(frame)
            total += int(frame["v"].sum())
            times = _millis(frame["at"])
            newest = max([*times, *([newest] if newest is not None else [])])
        self.tally.update((n, total, newest))
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(newest + TALLY_GAP_MS)
        yield pd.DataFrame({"k": [key[0]], "n": [called], "total": [total],
                            "at": [_stamp(newest)], "tag": ["seen"]})

    def handleExpiredTimer(self, key: Any, timerValues: Any,
                           expiredTimerInfo: Any) -> Iterator[pd.DataFrame]:
        n, total, _ = self.tally.get()
        self.tally.clear()
        at = expiredTimerInfo.getExpiryTimeInMs()
        yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total], "at": [_stamp(at)],
                            "tag": ["total"]})


class TallyRows(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.tally = handle.getValueState("tally", _TALLY)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        n, total, newest = self.tally.get() if self.tally.exists() else (0, 0, None)
        called = 0
        for row in rows:
            n += 1
            called += 1
            total += int(row.v)
            ms = int(pd.Timestamp(row.at).value // 1_000_000)
            newest = ms if newest is None else max(newest, ms)
        self.tally.update((n, total, newest))
        for expiry in list(self.handle.listTimers()):
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(newest + TALLY_GAP_MS)
        yield Row(k=key[0], n=called, total=total, at=_stamp(newest).to_pydatetime(),
                  tag="seen")

    def handleExpiredTimer(self, key: Any, timerValues: Any,
                           expiredTimerInfo: Any) -> Iterator[Row]:
        n, total, _ = self.tally.get()
        self.tally.clear()
        at = expiredTimerInfo.getExpiryTimeInMs()
        yield Row(k=key[0], n=n, total=total, at=_stamp(at).to_pydatetime(), tag="total")


class Backdated(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        for frame in rows:
            yield pd.DataFrame({"k": frame["k"], "v": frame["v"].astype("int64"),
                                "at": frame["ts"] - pd.Timedelta(minutes=1), "tag": "back"})
