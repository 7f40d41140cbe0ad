"""One event-time timeout per key, written three ways, for benchmarks/spark_timers.py.

Every key arrives once with `armed` true: the processor remembers the row's event time and
registers an event-time timer at event time + TIMEOUT_MS. Rows with `armed` false only carry
event time forward (they move the watermark) and are ignored. When a key's timer fires, the
processor emits (user, expiry, seen) and clears the key's state.

They live in an importable module (not in the script run as __main__) so executors load them
by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor as SparkProcessor
from pyspark.sql.types import LongType, StructField, StructType

from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

INPUT_SCHEMA = "user string, ts timestamp, armed boolean"
OUTPUT_SCHEMA = "user string, expiry long, seen long"
SEEN_STATE = StructType([StructField("seen", LongType(), True)])
TIMEOUT_MS = 30_000
_NS_PER_MS = 1_000_000
_PER_MS = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}


def armed_time_ms(frame: pd.DataFrame) -> int | None:
    """The newest event time (epoch ms) of the frame's armed rows, or None."""
    armed = frame["ts"][frame["armed"]]
    return None if armed.empty else int(pd.Timestamp(armed.max()).value // _NS_PER_MS)


class PerKeyTimeout(StatefulProcessor):
    """This library, per-key API: one call per key and one per fired timer."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.seen = handle.get_value_state("seen")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[tuple[Any, ...]]:
        newest = max((t for t in map(armed_time_ms, rows) if t is not None), default=None)
        if newest is not None:
            self.seen.update(newest)
            self.handle.register_timer(newest + TIMEOUT_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int
                             ) -> Iterator[tuple[Any, ...]]:
        seen = self.seen.get()
        self.seen.clear()
        yield (key[0], expiry_ms, seen)


class VectorizedTimeout(VectorizedStatefulProcessor):
    """This library, vectorized API: every armed key of the partition and every due timer of
    the partition in one call each, with bulk state access."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.seen = handle.get_value_state("seen")

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        if not len(batch):
            return iter(())
        ts = batch.table.column("ts")
        millis = pc.cast(ts, pa.int64()).to_numpy() // _PER_MS[ts.type.unit]
        millis = np.where(batch.table.column("armed").to_numpy(zero_copy_only=False),
                          millis, np.iinfo(np.int64).min)
        newest = np.maximum.reduceat(millis, batch.offsets[:-1])  # every key has >= 1 row
        armed = np.flatnonzero(newest > np.iinfo(np.int64).min)
        keys = batch.keys if len(armed) == len(batch) else batch.keys.take(armed)
        newest = newest[armed]
        self.seen.update_many(keys, newest.tolist())
        self.handle.register_timers(keys, (newest + TIMEOUT_MS).tolist())
        return iter(())

    def handle_expired_timers(self, timers: Any) -> Iterator[pa.Table]:
        seen = self.seen.get_many(timers.keys)
        self.seen.clear_many(timers.keys)
        yield pa.table({"user": pa.array([key[0] for key in timers.keys], pa.string()),
                        "expiry": pa.array(timers.expiry_ms, pa.int64()),
                        "seen": pa.array(seen, pa.int64())})


class TwsTimeout(SparkProcessor):
    """PySpark's transformWithStateInPandas; state and timers live in the JVM's RocksDB."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.seen = handle.getValueState("seen", SEEN_STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any
                        ) -> Iterator[pd.DataFrame]:
        newest = max((t for t in map(armed_time_ms, rows) if t is not None), default=None)
        if newest is not None:
            self.seen.update((newest,))
            self.handle.registerTimer(newest + TIMEOUT_MS)
        return iter(())

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                           ) -> Iterator[pd.DataFrame]:
        seen = self.seen.get()
        self.seen.clear()
        yield pd.DataFrame({"user": [key[0]], "expiry": [expiredTimerInfo.getExpiryTimeInMs()],
                            "seen": [None if seen is None else int(seen[0])]})

    def close(self) -> None:
        pass
