"""Drives a processor over one partition's batch, in transformWithState's order.

Initial state (first batch only), then the input rows key by key (per-key API: slices of one
frame) or all at once (vectorized API), then every timer that is due at the batch's processing
time or watermark, also for keys without rows in this batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pyspark_dstl.spark.codec.values import decode_key
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch, Keys
from pyspark_dstl.spark.processors.processor import (
    AnyProcessor,
    ExpiredTimers,
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.processors.state_variables import KeyContext
from pyspark_dstl.spark.stage.failures import note_key
from pyspark_dstl.spark.stage.output import OutputCollector
from pyspark_dstl.spark.store_access import StoreAccess
from pyspark_dstl.spark.time.modes import NO_TIME
from pyspark_dstl.spark.time.timers import DueTimer, TimerIndex


@dataclass(frozen=True)
class BatchTimes:
    """The clocks of one batch, chosen by the driver so that every task attempt agrees."""

    now_ms: int
    watermark_ms: int = NO_TIME
    time_mode: str = "none"

    @property
    def timer_threshold_ms(self) -> int | None:
        """Timers with an expiry at or before this fire; None when the mode has no timers."""
        if self.time_mode == "processing_time":
            return self.now_ms
        if self.time_mode == "event_time":
            return self.watermark_ms
        return None


@dataclass(frozen=True)
class RunResult:
    output: pa.Table
    keys: int
    timers_fired: int
    next_timer_ms: int | None


def run_processor(processor: AnyProcessor, store: StoreAccess, table: pa.Table,
                  key_columns: tuple[str, ...], output_schema: pa.Schema, *, batch_id: int,
                  partition_id: int, times: BatchTimes,
                  initial_state: pa.Table | None = None,
                  grouping: KeyGrouping | None = None) -> RunResult:
    """Output rows and counts of one partition's micro-batch. Keys take their key group from
    the stage's GROUP_COLUMN; `grouping` groups keys the processor passes itself (and the
    keys of a table without that column)."""
    if not isinstance(processor, StatefulProcessor | VectorizedStatefulProcessor):
        raise TypeError(f"{type(processor).__name__} is neither a StatefulProcessor nor a "
                        f"VectorizedStatefulProcessor")
    batch = KeyedBatch(table, key_columns, grouping)
    context = KeyContext(times.now_ms, watermark_ms=times.watermark_ms,
                         time_mode=times.time_mode, grouping=grouping)
    timers = TimerIndex(store)
    handle = StatefulProcessorHandle(store, context, batch_id, partition_id, timers)
    collector = OutputCollector(output_schema, getattr(processor, "display_name",
                                                       type(processor).__name__))
    processor.init(handle)
    if initial_state is not None:
        _apply_initial_state(processor, context, KeyedBatch(initial_state, key_columns,
                                                                  grouping))
    if isinstance(processor, VectorizedStatefulProcessor):
        _collect(collector, processor.handle_batch(batch))
    else:
        encoded = batch.keys.encoded
        context.batch_keys = encoded
        handle_rows = processor.handle_input_rows
        rows_of = processor.rows_by_key(batch)
        add = collector.add
        key: Any = None
        try:  # _collect inline: this loop runs once per key
            for index, key in enumerate(batch.keys):
                context.current = encoded[index]
                items = handle_rows(key, iter((rows_of(index),)))
                if items is not None:
                    for item in items:
                        add(item)
        except Exception as exc:
            note_key(exc, key_columns, key)
            raise
        context.current = None
        context.batch_keys = []
    fired, next_timer = _fire_timers(processor, timers, context, times, collector)
    return RunResult(collector.finish(), len(batch), fired, next_timer)


def _apply_initial_state(processor: AnyProcessor, context: KeyContext,
                         initial: KeyedBatch) -> None:
    if isinstance(processor, VectorizedStatefulProcessor):
        processor.handle_initial_state(initial)
        return
    encoded = initial.keys.encoded
    rows_of = processor.rows_by_key(initial, initial=True)
    for index, key in enumerate(initial.keys):
        context.current = encoded[index]
        processor.handle_initial_state(key, rows_of(index))
    context.current = None


def _fire_timers(processor: AnyProcessor, index: TimerIndex, context: KeyContext,
                 times: BatchTimes, collector: OutputCollector) -> tuple[int, int | None]:
    """(timers fired, earliest timer left) after calling the processor for every due timer."""
    threshold = times.timer_threshold_ms
    if threshold is None:
        return 0, None
    due = index.due(threshold)
    if due:
        if isinstance(processor, VectorizedStatefulProcessor):
            _fire_vectorized(processor, index, due, collector)
        else:
            _fire_per_key(processor, index, context, due, collector)
    return len(due), index.earliest()


def _fire_per_key(processor: StatefulProcessor, index: TimerIndex, context: KeyContext,
                  due: list[DueTimer], collector: OutputCollector) -> None:
    decoded: dict[bytes, tuple[Any, ...]] = {}
    deleted = index.watch_deletes()
    for timer in due:
        if deleted and timer.key + timer.expiry in deleted:  # deleted by an earlier handler
            continue
        key = decoded.get(timer.key)
        if key is None:
            key = decoded[timer.key] = decode_key(timer.key)
        context.current = timer.key
        _collect(collector, processor.handle_expired_timer(key, timer.expiry_ms))
        index.delete_fired(timer)
    context.current = None


def _fire_vectorized(processor: VectorizedStatefulProcessor, index: TimerIndex,
                     due: list[DueTimer], collector: OutputCollector) -> None:
    keys = Keys([decode_key(timer.key) for timer in due], [timer.key for timer in due])
    expiries = np.fromiter((timer.expiry_ms for timer in due), dtype=np.int64, count=len(due))
    _collect(collector, processor.handle_expired_timers(ExpiredTimers(keys, expiries)))
    index.delete_all_fired(due)


def _collect(collector: OutputCollector, items: Iterable[Any] | None) -> None:
    if items is None:
        return
    add = collector.add
    for item in items:
        add(item)
