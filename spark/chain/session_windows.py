"""A chained aggregation over `session_window(...)`: sessions that merge across batches.

Spark puts every row in the session [t, t + gap) of its event time t (Spark computes that
window in the step's projection, so a gap given as an expression works too) and merges the
sessions of one key that overlap or touch. Here a key's state is the list of its open
sessions, each with its buffers. Per batch: the rows of each key, sorted by session start,
form the batch's sessions (a new one starts where a row starts after every earlier row's end);
those are merged with the stored ones the same way, their buffers folded in start order (the
order Spark merges in). In output mode "append" a session is emitted and dropped once the
eviction watermark reaches its end (each session end has a timer, so only keys with a due
session are read); in "complete" mode every session is emitted every batch and none dropped;
"update" is refused, as in Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pyspark_dstl.spark.chain.aggregation import (
    COMPLETE,
    AggregationPlan,
    BufferCodec,
    KeyPart,
    distinct_keys,
)
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch, Keys
from pyspark_dstl.spark.processors.processor import (
    ExpiredTimers,
    Output,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)

STATE_NAME = "sessions"  # the value state: a key's open sessions, [start, end, *buffers] each
MICROS_PER_MS = 1000


def merged_sessions(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by (key, start): (each row's session number, the first row of each
    session). A row opens a session when its key changes or it starts after the latest end of
    the key's earlier rows; a row starting exactly at that end joins (sessions that touch
    merge, as in Spark)."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    latest = pd.Series(ends).groupby(keys).cummax().to_numpy()
    first_of_key = np.ones(len(keys), dtype=bool)
    first_of_key[1:] = keys[1:] != keys[:-1]
    before = np.empty(len(keys), dtype=np.int64)
    before[0] = 0
    before[1:] = latest[:-1]
    opens = first_of_key | (starts > before)
    numbers = np.cumsum(opens) - 1
    return numbers.astype(np.int64), np.flatnonzero(opens)


class SessionAggregationProcessor(VectorizedStatefulProcessor):
    """Runs one chained session-window aggregation in a stateful task. `session` is the key
    part of the session window; the state's grouping key is every other key part."""

    def __init__(self, plan: AggregationPlan, session: KeyPart) -> None:
        self.plan = plan
        self.session = session
        self.display_name = plan.label

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._state = handle.declare_state("value", STATE_NAME, None)
        self._codec = BufferCodec(self.plan)

    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        if len(batch):
            self._add_batch(batch)
        if self.plan.mode == COMPLETE:
            keys, values = self._state.entries()
            owners = [i for i, sessions in enumerate(values) for _ in sessions]
            if owners:
                yield self._output(keys.take(owners),
                                   [session for sessions in values for session in sessions])

    def _add_batch(self, batch: KeyedBatch) -> None:
        start_column, end_column = self.session.columns
        table, groups = batch.table, batch.group_ids
        starts = _micros(table.column(start_column))
        ends = _micros(table.column(end_column))
        order = np.lexsort((starts, groups))
        rows = table.take(pa.array(order, pa.int64()))
        keys_sorted, starts, ends = groups[order], starts[order], ends[order]
        numbers, firsts = merged_sessions(keys_sorted, starts, ends)
        count = len(firsts)
        buffers = self._codec.update(rows, numbers, count)
        session_keys = keys_sorted[firsts]
        session_starts = starts[firsts]
        session_ends = np.maximum.reduceat(ends, firsts) if count else ends[:0]
        self._merge_into_state(batch.keys, session_keys, session_starts, session_ends, buffers)

    def _merge_into_state(self, keys: Keys, session_keys: np.ndarray, starts: np.ndarray,
                          ends: np.ndarray, buffers: list[pa.Array]) -> None:
        stored = self._state.get_many(keys)
        old_keys, old_starts, old_ends, old_buffers = [], [], [], []
        for index, sessions in enumerate(stored):
            for session in sessions or ():
                old_keys.append(index)
                old_starts.append(int(session[0]))
                old_ends.append(int(session[1]))
                old_buffers.append(session[2:])
        if old_keys:
            decoded = self._codec.decode(old_buffers)
            buffers = [pa.concat_arrays([before, now])
                       for before, now in zip(decoded, buffers, strict=True)]
            session_keys = np.concatenate([np.asarray(old_keys, dtype=np.int64), session_keys])
            starts = np.concatenate([np.asarray(old_starts, dtype=np.int64), starts])
            ends = np.concatenate([np.asarray(old_ends, dtype=np.int64), ends])
        order = np.lexsort((starts, session_keys))  # stable: stored first on equal starts
        session_keys, starts, ends = session_keys[order], starts[order], ends[order]
        buffers = [column.take(pa.array(order, pa.int64())) for column in buffers]
        numbers, firsts = merged_sessions(session_keys, starts, ends)
        merged = self._codec.merge(buffers, numbers, len(firsts))
        merged_keys = session_keys[firsts]
        merged_starts = starts[firsts]
        merged_ends = np.maximum.reduceat(ends, firsts)
        plain = self._codec.encode(merged)
        per_key: dict[int, list[list[Any]]] = {}
        for number, key in enumerate(merged_keys.tolist()):
            per_key.setdefault(key, []).append(
                [int(merged_starts[number]), int(merged_ends[number]), *plain[number]])
        touched = sorted(per_key)
        self._state.update_many(keys.take(touched), [per_key[key] for key in touched])
        if self.plan.mode == COMPLETE:  # sessions are never dropped: no timers
            return
        expiries = -(-merged_ends // MICROS_PER_MS)
        self._handle.register_timers(keys.take(merged_keys.tolist()), expiries.tolist(),
                                     allow_due=True)

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Output]:
        if self.plan.mode == COMPLETE:
            return
        keys = distinct_keys(timers.keys)
        stored = self._state.get_many(keys)
        evict_us = self._handle.watermark_ms * MICROS_PER_MS
        due_keys: list[int] = []
        due_sessions: list[list[Any]] = []
        kept: list[tuple[int, list[Any]]] = []
        emptied: list[int] = []
        for index, sessions in enumerate(stored):
            if not sessions:
                continue
            remaining = [s for s in sessions if int(s[1]) > evict_us]
            if len(remaining) == len(sessions):
                continue
            for session in sessions:
                if int(session[1]) <= evict_us:
                    due_keys.append(index)
                    due_sessions.append(session)
            if remaining:
                kept.append((index, remaining))
            else:
                emptied.append(index)
        if kept:
            self._state.update_many(keys.take([i for i, _ in kept]), [s for _, s in kept])
        if emptied:
            self._state.clear_many(keys.take(emptied))
        if due_sessions:
            yield self._output(keys.take(due_keys), due_sessions)

    def _output(self, keys: Keys, sessions: Sequence[Sequence[Any]]) -> pa.Table:
        others = [part for part in self.plan.keys if part is not self.session]
        other_types = [kind for part, kinds in _types_by_part(self.plan) if part in others
                       for kind in kinds]
        columns = list(zip(*list(keys), strict=True)) if len(keys) else \
            [() for _ in other_types]
        arrays = [pa.array(list(values), kind)
                  for values, kind in zip(columns, other_types, strict=True)]
        start_type, end_type = dict(_types_by_part(self.plan))[self.session]
        named: dict[str, pa.Array] = {}
        position = 0
        for part in self.plan.keys:
            if part is self.session:
                window = pa.StructArray.from_arrays(
                    [pa.array([int(s[0]) for s in sessions], pa.int64()).cast(start_type),
                     pa.array([int(s[1]) for s in sessions], pa.int64()).cast(end_type)],
                    ["start", "end"])
                if part.output is not None:
                    named[part.output] = window
                continue
            width = len(part.columns)
            if part.output is not None:
                named[part.output] = arrays[position] if width == 1 else \
                    pa.StructArray.from_arrays(arrays[position:position + width],
                                               ["start", "end"])
            position += width
        named.update(self._codec.finish(self._codec.decode([s[2:] for s in sessions])))
        return pa.table({name: named[name] for name in self.plan.output_names})


def _types_by_part(plan: AggregationPlan) -> list[tuple[KeyPart, tuple[pa.DataType, ...]]]:
    """Each key part with the Arrow types of its columns (plan.key_types is flattened)."""
    parts = []
    position = 0
    for part in plan.keys:
        width = len(part.columns)
        parts.append((part, tuple(plan.key_types[position:position + width])))
        position += width
    return parts


def _micros(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Epoch microseconds of a timestamp column (the projection left out null times)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    micros = array.cast(pa.timestamp("us", tz=getattr(array.type, "tz", None))).cast(pa.int64())
    return np.asarray(micros.to_numpy(zero_copy_only=False), dtype=np.int64)
