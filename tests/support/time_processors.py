"""Processors with timers for the Spark tests (executors import them from here by name)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.processors.processor import ExpiredTimers

GAP_MS = 30_000
EVENT_SCHEMA = "user string, ts timestamp"
SESSION_SCHEMA = "user string, events long, closed_at long"


def to_ms(times: pd.Series) -> pd.Series:
    """Epoch milliseconds of a timestamp column, whatever its pandas resolution."""
    return (pd.to_datetime(times, utc=True) - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(
        milliseconds=1)


def millis(frame: pd.DataFrame, column: str = "ts") -> int:
    """The newest event time of a frame in epoch milliseconds."""
    return int(to_ms(frame[column]).max())


class InactivitySessions(StatefulProcessor):
    """Counts a user's events; the session closes GAP_MS of event time after its last event."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.events = handle.get_value_state("events")
        self.last = handle.get_value_state("last")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        count, last = self.events.get(0), self.last.get(None)
        for frame in rows:
            count += len(frame)
            last = max(last or 0, millis(frame))
        for timer in self.handle.list_timers():
            self.handle.delete_timer(timer)
        self.events.update(count)
        self.last.update(last)
        self.handle.register_timer(last + GAP_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Any]:
        yield (key[0], self.events.get(0), expiry_ms)
        self.events.clear()
        self.last.clear()


class VectorizedInactivitySessions(VectorizedStatefulProcessor):
    """The same sessions with bulk state access and all due timers at once."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.events = handle.get_value_state("events")
        self.last = handle.get_value_state("last")

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Any]:
        keys = batch.keys
        frame = batch.frame.assign(ms=to_ms(batch.frame["ts"]))
        newest = frame.groupby(batch.group_ids)["ms"].max().to_numpy()
        old_last = self.last.get_many(keys)
        for key, last in zip(keys, old_last, strict=True):
            if last is not None:
                self.handle.delete_timers([key], [last + GAP_MS])
        counts = [c + int(n) for c, n in zip(self.events.get_many(keys, 0), batch.counts,
                                             strict=True)]
        lasts = [max(int(n), o or 0) for n, o in zip(newest, old_last, strict=True)]
        self.events.update_many(keys, counts)
        self.last.update_many(keys, lasts)
        self.handle.register_timers(keys, [last + GAP_MS for last in lasts])
        return iter(())

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Any]:
        counts = self.events.get_many(timers.keys, 0)
        yield pd.DataFrame({"user": [k[0] for k in timers.keys], "events": counts,
                            "closed_at": timers.expiry_ms})
        self.events.clear_many(timers.keys)
        self.last.clear_many(timers.keys)


class Alarm(StatefulProcessor):
    """Each batch with rows of a key sets an alarm `delay_ms` of processing time later."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        self.handle.register_timer(self.handle.processing_time_ms + self.delay_ms)
        yield (key[0], "armed", self.handle.batch_id)

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Any]:
        yield (key[0], "rang", self.handle.batch_id)


class CountFromInitial(StatefulProcessor):
    """A running count that starts from the initial state's `start` column."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_initial_state(self, key: tuple[Any, ...], rows: pd.DataFrame) -> None:
        self.count.update(int(rows["start"].sum()))

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


class KeyEcho(StatefulProcessor):
    """Emits every key as text with its row count (keys of any supported type)."""

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        yield (repr(key), sum(len(frame) for frame in rows))


class BadTtl(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        handle.get_value_state("seen", ttl="ten minutes")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        return iter(())


class ClockEcho(StatefulProcessor):
    """Emits each key with the batch's processing time."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        yield (key[0], self.handle.processing_time_ms)
