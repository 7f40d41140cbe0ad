"""The processors of benchmark 6 (benchmarks/spark_e2e.py).

They live in an importable module (not in the script run as __main__) so executors load them by
name. The keyed running count is written five ways; every one emits (user, count) for each key
of the batch, with the count after it. `TwsActivity` is a PySpark processor with list and map
state and event-time timers. The PySpark processors run unchanged on Spark's own operator and
through the switch (`pyspark_dstl.install()`), written as the README's example is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor as SparkProcessor
from pyspark.sql.types import LongType, StructField, StructType

from pyspark_dstl.spark import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

OUTPUT_SCHEMA = "user string, count long"
INPUT_SCHEMA = "user string, v long"
STATE_SCHEMA = "count long"
COUNT_STATE = StructType([StructField("count", LongType(), True)])


class PerKeyCount(StatefulProcessor):
    """(a) this library, per-key API."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[tuple[Any, ...]]:
        total = self.count.get(0) + sum(len(frame) for frame in rows)
        self.count.update(total)
        yield (key[0], total)


class VectorizedCount(VectorizedStatefulProcessor):
    """(a') this library, vectorized API: one bulk read and one bulk write per partition."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        totals = np.asarray(self.count.get_many(batch.keys, 0), dtype=np.int64) + batch.counts
        self.count.update_many(batch.keys, totals)
        yield pa.table({"user": batch.key_table.column(0), "count": pa.array(totals)})


def group_state_count(key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                      state: Any) -> Iterator[pd.DataFrame]:
    """(b) PySpark's applyInPandasWithState."""
    total = int(state.get[0]) if state.exists else 0
    total += sum(len(frame) for frame in frames)
    state.update((total,))
    yield pd.DataFrame({"user": [key[0]], "count": [total]})


class TwsCount(SparkProcessor):
    """(c), (s) PySpark's transformWithStateInPandas, the README's processor: a running count
    in value state, one frame out per key."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", COUNT_STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any
                        ) -> Iterator[pd.DataFrame]:
        total = (self.count.get() or (0,))[0] + sum(len(frame) for frame in rows)
        self.count.update((total,))
        yield pd.DataFrame({"user": [key[0]], "count": [total]})

    def close(self) -> None:
        pass


class TwsCountRows(SparkProcessor):
    """(c'), (s') the same count for transformWithState: Rows in, one Row out per key."""

    def init(self, handle: Any) -> None:
        self.count = handle.getValueState("count", COUNT_STATE)

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
        total = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((total,))
        yield Row(user=key[0], count=total)

    def close(self) -> None:
        pass


ACTIVITY_GAP_MS = 15_001  # odd: an expiry never equals a watermark (event times are even)


class TwsActivity(SparkProcessor):
    """(c''), (s'') list and map state and timers, event time (`v` is the row's event time in
    ms): the user's newest three event times (list state), rows per bucket v % 4 (map
    state), and one timer ACTIVITY_GAP_MS after the user's newest row (the old one deleted).
    Emits (user, rows so far) per key of the batch, and (user, 0) when the timer fires, which
    clears the user's state."""

    def init(self, handle: Any) -> None:
        self.handle = handle
        self.recent = handle.getListState("recent", "ts long")
        self.buckets = handle.getMapState("buckets", "bucket int", "rows long")

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any
                        ) -> Iterator[pd.DataFrame]:
        times = np.concatenate([frame["v"].to_numpy() for frame in rows])
        recent = [stored[0] for stored in self.recent.get()] + sorted(times.tolist())
        self.recent.put([(ts,) for ts in recent[-3:]])
        buckets, counts = np.unique(times % 4, return_counts=True)
        for bucket, count in zip(buckets.tolist(), counts.tolist(), strict=True):
            old = self.buckets.getValue((bucket,))
            self.buckets.updateValue((bucket,), ((old[0] if old else 0) + count,))
        total = sum(value[0] for value in self.buckets.values())
        for expiry in self.handle.listTimers():
            self.handle.deleteTimer(expiry)
        self.handle.registerTimer(int(times.max()) + ACTIVITY_GAP_MS)
        yield pd.DataFrame({"user": [key[0]], "count": [total]})

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                           ) -> Iterator[pd.DataFrame]:
        self.recent.clear()
        self.buckets.clear()
        yield pd.DataFrame({"user": [key[0]], "count": [0]})

    def close(self) -> None:
        pass
