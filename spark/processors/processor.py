"""The user's side: StatefulProcessor (per key) and VectorizedStatefulProcessor (per batch).

Modelled on PySpark's transformWithStateInPandas, but the state lives in the same Python process
as the processor, so a state access is a local RocksDB read, not a round trip to the JVM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from pyspark_dstl.core.units import parse_duration
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch, Keys
from pyspark_dstl.spark.processors.state_variables import (
    STATE_KINDS,
    KeyContext,
    ListState,
    MapState,
    ValueState,
    _StateVariable,
    purge_state,
)
from pyspark_dstl.spark.spark_errors import StateVariableError, TimerError
from pyspark_dstl.spark.store_access import StoreAccess
from pyspark_dstl.spark.time.timers import TimerIndex

# What handle_input_rows / handle_batch may yield: a frame, Arrow data, or one row as a tuple
# in output-schema order (the cheapest way to emit one row per key).
Output: TypeAlias = pd.DataFrame | pa.RecordBatch | pa.Table | tuple[Any, ...]


@dataclass(frozen=True)
class ExpiredTimers:
    """The due timers of one partition for a vectorized processor: key i's timer expired at
    `expiry_ms[i]` (a key appears once per due timer, in expiry order)."""

    keys: Keys
    expiry_ms: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)


class StatefulProcessorHandle:
    """Gives a processor its state variables, its timers and facts about the running task."""

    def __init__(self, store: StoreAccess, context: KeyContext, batch_id: int,
                 partition_id: int, timers: TimerIndex | None = None, *,
                 declaring_only: bool = False) -> None:
        """`timers`: the runner's index of `store`, shared so that it sees the timers the
        processor deletes while timers fire."""
        self._store = store
        self._context = context
        self._variables: dict[str, _StateVariable] = {}
        self._timers = timers if timers is not None else TimerIndex(store)
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.declaring_only = declaring_only  # the driver's check of init(): no state access

    @property
    def processing_time_ms(self) -> int:
        """The batch's processing time (epoch ms), the clock of every TTL and of
        processing-time timers."""
        return self._context.now_ms

    @property
    def watermark_ms(self) -> int:
        """The event-time watermark of this batch (epoch ms); -1 without event time."""
        return self._context.watermark_ms

    @property
    def time_mode(self) -> str:
        """"none", "processing_time" or "event_time", as given to process(...)."""
        return self._context.time_mode

    # --- timers of the current key (per-key processors) ----------------------------------

    def register_timer(self, expiry_ms: int, *, allow_due: bool = False) -> None:
        """Call `handle_expired_timer(key, expiry_ms)` once the batch's processing time (or, in
        event time, the watermark) reaches `expiry_ms`; registering it twice keeps one timer.

        An event-time expiry at or before the watermark is refused unless `allow_due`: then the
        timer is due at once and fires in this batch after the input rows, as PySpark's
        transformWithState does (registered while timers fire, it fires in the next batch)."""
        key = self._timer_key("register_timer")
        if not allow_due:
            self._check_future(expiry_ms)
        self._timers.register(key, expiry_ms)

    def delete_timer(self, expiry_ms: int) -> None:
        self._timers.delete(self._timer_key("delete_timer"), expiry_ms)

    def list_timers(self) -> list[int]:
        """The current key's timers, earliest first."""
        return self._timers.of_key(self._timer_key("list_timers"))

    # --- timers of many keys (vectorized processors) -------------------------------------

    def register_timers(self, keys: Sequence[Sequence[Any]], expiry_ms: Iterable[int], *,
                        allow_due: bool = False) -> None:
        """One timer per (key, expiry) pair; `allow_due` as in `register_timer` (a due timer
        fires in this batch, after handle_batch)."""
        self._require_time_mode("register_timers")
        encoded = self._context.encode_keys(keys)
        expiries = [int(e) for e in expiry_ms]
        if len(expiries) != len(encoded):
            raise TimerError(f"register_timers got {len(encoded)} keys and {len(expiries)} "
                             f"expiries")
        for key, expiry in zip(encoded, expiries, strict=True):
            if not allow_due:
                self._check_future(expiry)
            self._timers.register(key, expiry)

    def delete_timers(self, keys: Sequence[Sequence[Any]], expiry_ms: Iterable[int]) -> None:
        self._require_time_mode("delete_timers")
        encoded = self._context.encode_keys(keys)
        expiries = [int(e) for e in expiry_ms]
        if len(expiries) != len(encoded):
            raise TimerError(f"delete_timers got {len(encoded)} keys and {len(expiries)} "
                             f"expiries")
        for key, expiry in zip(encoded, expiries, strict=True):
            self._timers.delete(key, expiry)

    def list_timers_of(self, key: Sequence[Any]) -> list[int]:
        self._require_time_mode("list_timers_of")
        return self._timers.of_key(self._context.encode_keys([key])[0])

    def _require_time_mode(self, call: str) -> None:
        if self._context.time_mode == "none":
            raise TimerError(f"{call}: timers need a time mode; pass "
                             f"time_mode=\"processing_time\" or \"event_time\" to process(...)")

    def _timer_key(self, call: str) -> bytes:
        self._require_time_mode(call)
        key = self._context.current
        if key is None:
            raise TimerError(f"{call}: no current grouping key; per-key timers work inside "
                             f"handle_input_rows, handle_expired_timer and "
                             f"handle_initial_state, use register_timers(keys, expiries) in a "
                             f"vectorized processor")
        return key

    def _check_future(self, expiry_ms: int) -> None:
        context = self._context
        if context.time_mode == "event_time" and int(expiry_ms) <= context.watermark_ms:
            raise TimerError(f"timer expiry {expiry_ms} ms is not later than the current "
                             f"watermark {context.watermark_ms} ms: it would never fire in "
                             f"order")

    def _declare(self, kind: str, name: str, ttl: float | str | None) -> Any:
        _check_name(name)
        ttl_ms = None if ttl is None else round(parse_duration(ttl, f"ttl of {name}") * 1000)
        if ttl_ms is not None and ttl_ms <= 0:
            raise StateVariableError(f"state {name}: ttl must be positive, got {ttl!r}")
        return self.declare_state(kind, name, ttl_ms)

    def declare_state(self, kind: str, name: str, ttl_ms: int | None) -> Any:
        """The state variable `name` of `kind` ("value", "list" or "map") with a TTL in
        milliseconds (None: no expiry); what get_*_state use, and adapters that speak in
        milliseconds."""
        _check_name(name)
        if kind not in STATE_KINDS:
            raise StateVariableError(f"state {name}: unknown kind {kind!r}")
        if ttl_ms is not None and (isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int)
                                   or ttl_ms <= 0):
            raise StateVariableError(f"state {name}: ttl must be a positive number of "
                                     f"milliseconds, got {ttl_ms!r}")
        existing = self._variables.get(name)
        if existing is not None:
            if existing.kind != kind or existing.ttl_ms != ttl_ms:
                raise StateVariableError(f"state {name} is already declared as {existing.kind} "
                                         f"state with ttl_ms={existing.ttl_ms}")
            return existing
        variable = STATE_KINDS[kind](self._store, name, ttl_ms, self._context)
        self._variables[name] = variable
        return variable

    def get_value_state(self, name: str, ttl: float | str | None = None) -> ValueState:
        """`ttl`: seconds or a duration such as "30min"; None keeps values forever."""
        variable: ValueState = self._declare("value", name, ttl)
        return variable

    def get_list_state(self, name: str, ttl: float | str | None = None) -> ListState:
        variable: ListState = self._declare("list", name, ttl)
        return variable

    def get_map_state(self, name: str, ttl: float | str | None = None) -> MapState:
        variable: MapState = self._declare("map", name, ttl)
        return variable

    def delete_state(self, name: str) -> None:
        """Remove every entry of the state variable `name` (of any kind, all keys of this
        partition) and forget its declaration; a no-op in the driver's check of init()."""
        _check_name(name)
        existing = self._variables.pop(name, None)
        if existing is not None:
            existing.forget_cached()
        if not self.declaring_only:
            purge_state(self._store, name)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise StateVariableError(f"state variable name must be a non-empty string without "
                                 f"NUL, got {name!r}")


class StatefulProcessor(ABC):
    """Called once per grouping key with that key's rows of the micro-batch.

    A fresh copy of the processor runs in every task: `init` first, then `handle_input_rows`
    for each key of the partition, then the state is committed, then `close`.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: B027 - optional hook
        """Declare state variables here (handle.get_value_state etc.)."""

    @abstractmethod
    def handle_input_rows(self, key: tuple[Any, ...],
                          rows: Iterator[pd.DataFrame]) -> Iterator[Output]:
        """Yield output for `key`: frames, Arrow batches or single rows as tuples."""

    def rows_by_key(self, batch: KeyedBatch, initial: bool = False) -> Callable[[int], Any]:
        """What handle_input_rows (or, with `initial`, handle_initial_state) gets for key
        number i of `batch`: by default a slice of one pandas frame. Override to hand rows
        over in another form, built once per batch (the PySpark adapter builds Rows)."""
        return batch.rows_of

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Output]:
        """A timer of `key` is due: called after every key's input rows, also for keys with
        no rows in the batch; the timer is deleted once this returns."""
        return iter(())

    def handle_initial_state(self, key: tuple[Any, ...],  # noqa: B027 - optional hook
                             rows: pd.DataFrame) -> None:
        """`key`'s rows of the initial state DataFrame: called once, in the first batch,
        before that batch's input rows."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Runs after the partition's state is committed."""


class VectorizedStatefulProcessor(ABC):
    """Called once per partition and micro-batch with all its rows grouped by key.

    Use the bulk state methods (ValueState.get_many / update_many / clear_many) with
    `batch.keys` to read and write the state of every key at once.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:  # noqa: B027 - optional hook
        """Declare state variables here (handle.get_value_state etc.)."""

    @abstractmethod
    def handle_batch(self, batch: KeyedBatch) -> Iterator[Output]:
        """Yield output for the whole batch: frames, Arrow batches or rows as tuples."""

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Output]:
        """Every due timer of the partition at once, after `handle_batch`; they are deleted
        once this returns."""
        return iter(())

    def handle_initial_state(self, batch: KeyedBatch) -> None:  # noqa: B027 - optional hook
        """The partition's rows of the initial state DataFrame, grouped by key: called once,
        in the first batch, before `handle_batch`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Runs after the partition's state is committed."""


AnyProcessor: TypeAlias = StatefulProcessor | VectorizedStatefulProcessor
