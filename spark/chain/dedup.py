"""A chained `dropDuplicates(...)` or `dropDuplicatesWithinWatermark(...)` as a vectorized
processor of this backend.

As in Spark: within a batch the first row of a key (in the partition's order) is the one kept;
a key seen in an earlier batch, whose entry is still in the state, drops the row. The state
keeps one entry per key. `dropDuplicates` evicts an entry only when its key holds the
event-time column, once the eviction watermark reaches that time (otherwise entries stay
forever, as in Spark); `dropDuplicatesWithinWatermark` keeps each entry until the watermark
reaches the row's event time plus the watermark delay of the query's `withWatermark`. Either
eviction happens after the batch's rows, through a timer at that time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyspark_dstl.spark.chain.aggregation import MICROS_PER_MS, distinct_keys, expiries_ms
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.processors.processor import (
    ExpiredTimers,
    Output,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

STATE_NAME = "seen"  # the value state: one entry per key seen (its expiry in microseconds)


@dataclass(frozen=True)
class DedupPlan:
    key_columns: tuple[str, ...]
    output_names: tuple[str, ...]
    event_time_column: str | None = None  # the input's event-time column
    within_watermark: bool = False
    delay_ms: int = 0  # dropDuplicatesWithinWatermark: how long an entry lives past its time
    label: str = "dropDuplicates"

    @property
    def evicts(self) -> bool:
        """Whether entries ever leave the state."""
        if self.event_time_column is None:
            return False
        return self.within_watermark or self.event_time_column in self.key_columns


class DeduplicationProcessor(VectorizedStatefulProcessor):
    """Runs one chained deduplication in a stateful task."""

    def __init__(self, plan: DedupPlan) -> None:
        self.plan = plan
        self.display_name = plan.label

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.declare_state("value", STATE_NAME, None)

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        if not len(batch):
            return
        stored = self._state.get_many(batch.keys)
        new = np.fromiter((value is None for value in stored), dtype=bool, count=len(batch))
        fresh = np.flatnonzero(new)
        if not len(fresh):
            return
        firsts = batch.offsets[:-1][fresh]
        rows = batch.table.take(pa.array(firsts, pa.int64()))
        keys = batch.keys.take(fresh)
        values = [0] * len(fresh)
        plan = self.plan
        if plan.evicts:
            assert plan.event_time_column is not None
            with_time, expiries = expiries_ms(rows.column(plan.event_time_column))
            if plan.within_watermark:
                micros = _micros_of(rows.column(plan.event_time_column))
                ends = micros[with_time] + plan.delay_ms * MICROS_PER_MS
                expiries = -(-ends // MICROS_PER_MS)
                for index, end in zip(with_time.tolist(), ends.tolist(), strict=True):
                    values[index] = int(end)
            if len(with_time):
                self._handle.register_timers(keys.take(with_time), expiries.tolist(),
                                             allow_due=True)
        self._state.update_many(keys, values)
        yield rows.select(list(plan.output_names))

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Output]:
        self._state.clear_many(distinct_keys(timers.keys))
        return iter(())


def _micros_of(column: pa.ChunkedArray) -> np.ndarray:
    array = column.combine_chunks()
    micros = array.cast(pa.timestamp("us", tz=getattr(array.type, "tz", None))).cast(pa.int64())
    return np.asarray(micros.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
