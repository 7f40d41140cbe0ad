"""A chained streaming aggregation (`groupBy(...).agg(...)`, with `window(...)` or plain keys)
as a vectorized processor of this backend.

Per batch and state partition: the batch's rows are folded into one buffer per key with Arrow
(`aggregates.update`), merged with the stored buffers of the same keys (`aggregates.merge`,
stored first) and written back in bulk. What is emitted follows the query's output mode as
in Spark: "update" emits every key this batch changed, "complete" the whole state every batch,
"append" a key once the eviction watermark passed its event time (a window's end, or the
event-time column itself when it is a key), and only then. When the key holds event time, each
new key gets a timer at that time, so eviction reads only the due keys (Spark scans the whole
state for them); in "update" mode a due key is removed without being emitted, in "complete"
mode nothing is ever removed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.spark.chain import aggregates
from pyspark_dstl.spark.chain.aggregates import AggregateSpec
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch, Keys
from pyspark_dstl.spark.processors.processor import (
    ExpiredTimers,
    Output,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.processors.state_variables import ValueState

STATE_NAME = "aggregate"  # the value state holding every key's buffers
APPEND, UPDATE, COMPLETE = "append", "update", "complete"
MICROS_PER_MS = 1000


@dataclass(frozen=True)
class KeyPart:
    """One grouping column of the output: a plain column, or a time window stored as its
    (start, end) columns and emitted as struct<start, end>. `output` None: the hidden constant
    key of an aggregation without grouping columns."""

    output: str | None
    columns: tuple[str, ...]

    @property
    def window(self) -> bool:
        return len(self.columns) == 2


@dataclass(frozen=True)
class AggregationPlan:
    """What every task of a chained aggregation needs, as plain data."""

    keys: tuple[KeyPart, ...]
    aggregates: tuple[AggregateSpec, ...]
    output_names: tuple[str, ...]  # in output order
    key_types: tuple[pa.DataType, ...]  # of the flattened key columns, in key order
    mode: str  # the query's output mode
    event_time_column: str | None = None  # the key column whose time evicts the key
    label: str = "aggregation"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(column for part in self.keys for column in part.columns)

    @property
    def buffer_types(self) -> list[pa.DataType]:
        return [kind for spec in self.aggregates for kind in spec.buffer_types]


class BufferCodec:
    """Every key's buffers of all aggregates, as one stored value (a list of plain values)."""

    def __init__(self, plan: AggregationPlan) -> None:
        self.plan = plan
        self.types = plan.buffer_types

    def encode(self, buffers: Sequence[pa.Array]) -> list[list[Any]]:
        columns = [aggregates.to_plain(column) for column in buffers]
        return [list(row) for row in zip(*columns, strict=True)] if columns else []

    def decode(self, values: Sequence[Sequence[Any]]) -> list[pa.Array]:
        return [aggregates.from_plain([value[i] for value in values], kind)
                for i, kind in enumerate(self.types)]

    def update(self, table: pa.Table, groups: np.ndarray, n: int) -> list[pa.Array]:
        """The buffers of the n groups of `table`'s rows."""
        built: list[pa.Array] = []
        for spec in self.plan.aggregates:
            for array, kind in zip(aggregates.update(spec, table, groups, n), spec.buffer_types,
                                   strict=True):
                built.append(array if array.type == kind else array.cast(kind))
        return built

    def merge(self, rows: Sequence[pa.Array], groups: np.ndarray, n: int) -> list[pa.Array]:
        """Rows of buffers (several per group, in order) combined into one per group."""
        merged: list[pa.Array] = []
        start = 0
        for spec in self.plan.aggregates:
            part = list(rows[start:start + spec.width])
            merged.extend(aggregates.merge(spec, part, groups, n))
            start += spec.width
        return merged

    def finish(self, buffers: Sequence[pa.Array]) -> dict[str, pa.Array]:
        results: dict[str, pa.Array] = {}
        start = 0
        for spec in self.plan.aggregates:
            results[spec.output] = aggregates.finish(spec, list(buffers[start:start + spec.width]))
            start += spec.width
        return results


def merge_with_stored(codec: BufferCodec, state: ValueState, keys: Keys,
                      partial: list[pa.Array]) -> tuple[list[pa.Array], np.ndarray]:
    """(the merged buffers of `keys`, which keys had stored buffers before)."""
    n = len(keys)
    stored = state.get_many(keys)
    present = np.fromiter((value is not None for value in stored), dtype=bool, count=n)
    if not present.any():
        return partial, present
    index = np.flatnonzero(present)
    old = codec.decode([stored[i] for i in index])
    rows = [pa.concat_arrays([before, now]) for before, now in zip(old, partial, strict=True)]
    groups = np.concatenate([index, np.arange(n, dtype=np.int64)])
    return codec.merge(rows, groups, n), present


def expiries_ms(times: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(rows with a time, the time of each as the first epoch millisecond at or after it):
    a key whose time is t microseconds is due once the watermark w (ms) has t <= w * 1000,
    that is once w >= ceil(t / 1000)."""
    micros = pc.cast(pc.cast(times, pa.timestamp("us", tz=getattr(times.type, "tz", None)))
                     if pa.types.is_timestamp(times.type) else times, pa.int64())
    values = np.asarray(micros.to_numpy(zero_copy_only=False))
    valid = np.asarray(micros.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    rows = np.flatnonzero(valid)
    picked = values[rows].astype(np.int64)
    return rows, -(-picked // MICROS_PER_MS)


class AggregationProcessor(VectorizedStatefulProcessor):
    """Runs one chained aggregation in a stateful task."""

    def __init__(self, plan: AggregationPlan) -> None:
        self.plan = plan
        self.display_name = plan.label

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.declare_state("value", STATE_NAME, None)
        self._codec = BufferCodec(self.plan)

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        plan = self.plan
        if len(batch):
            codec = self._codec
            partial = codec.update(batch.table, batch.group_ids, len(batch))
            merged, present = merge_with_stored(codec, self._state, batch.keys, partial)
            self._state.update_many(batch.keys, codec.encode(merged))
            self._register_evictions(batch, np.flatnonzero(~present))
            if plan.mode == UPDATE:
                key_columns = [batch.key_table.column(name).combine_chunks()
                               for name in plan.key_columns]
                yield self._output(key_columns, merged)
        if plan.mode == COMPLETE:
            keys, values = self._state.entries()
            if len(keys):
                yield self._output(self._key_arrays(keys), self._codec.decode(values))

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Output]:
        keys = distinct_keys(timers.keys)
        values = self._state.get_many(keys)
        held = [i for i, value in enumerate(values) if value is not None]
        if not held:
            return
        due = keys.take(held)
        if self.plan.mode == APPEND:
            yield self._output(self._key_arrays(due),
                               self._codec.decode([values[i] for i in held]))
        if self.plan.mode != COMPLETE:
            self._state.clear_many(due)

    def _register_evictions(self, batch: KeyedBatch, new: np.ndarray) -> None:
        column = self.plan.event_time_column
        if column is None or not len(new) or self.plan.mode == COMPLETE:
            return
        times = batch.key_table.column(column).combine_chunks().take(pa.array(new, pa.int64()))
        rows, expiries = expiries_ms(times)
        if len(rows):
            self._handle.register_timers(batch.keys.take(new[rows]), expiries.tolist(),
                                         allow_due=True)

    def _key_arrays(self, keys: Keys) -> list[pa.Array]:
        columns = list(zip(*list(keys), strict=True)) if len(keys) else \
            [() for _ in self.plan.key_types]
        return [pa.array(list(values), kind)
                for values, kind in zip(columns, self.plan.key_types, strict=True)]

    def _output(self, key_columns: Sequence[pa.Array], buffers: Sequence[pa.Array]) -> pa.Table:
        """The output rows: grouping columns (windows as struct<start, end>), then results."""
        named: dict[str, pa.Array] = {}
        position = 0
        for part in self.plan.keys:
            arrays = key_columns[position:position + len(part.columns)]
            position += len(part.columns)
            if part.output is None:
                continue
            named[part.output] = (pa.StructArray.from_arrays(list(arrays), ["start", "end"])
                                  if part.window else arrays[0])
        named.update(self._codec.finish(buffers))
        return pa.table({name: named[name] for name in self.plan.output_names})


def distinct_keys(keys: Keys) -> Keys:
    """`keys` without repeats (a key with two due timers is evicted once)."""
    seen: dict[bytes, int] = {}
    for index, encoded in enumerate(keys.encoded):
        seen.setdefault(encoded, index)
    if len(seen) == len(keys):
        return keys
    return keys.take(list(seen.values()))
