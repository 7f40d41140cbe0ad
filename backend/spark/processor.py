"""The user's side: StatefulProcessor (per key) and VectorizedStatefulProcessor (per batch).

Modelled on PySpark's transformWithStateInPandas, but the state lives in the same Python process
as the processor, so a state access is a local RocksDB read, not a round trip to the JVM.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa

from pyspark_dstl.backend.spark.errors import StateVariableError
from pyspark_dstl.backend.spark.grouping import KeyedBatch
from pyspark_dstl.backend.spark.state import (
    STATE_KINDS,
    KeyContext,
    ListState,
    MapState,
    StoreAccess,
    ValueState,
    _StateVariable,
)
from pyspark_dstl.core.units import parse_duration

# What handle_input_rows / handle_batch may yield: a frame, Arrow data, or one row as a tuple
# in output-schema order (the cheapest way to emit one row per key).
Output: TypeAlias = pd.DataFrame | pa.RecordBatch | pa.Table | tuple[Any, ...]


class StatefulProcessorHandle:
    """Gives a processor its state variables and facts about the running task."""

    def __init__(self, store: StoreAccess, context: KeyContext, batch_id: int,
                 partition_id: int) -> None:
        self._store = store
        self._context = context
        self._variables: dict[str, _StateVariable] = {}
        self.batch_id = batch_id
        self.partition_id = partition_id

    @property
    def processing_time_ms(self) -> int:
        """The batch's processing time (epoch ms), the clock of every TTL."""
        return self._context.now_ms

    def _declare(self, kind: str, name: str, ttl: float | str | None) -> Any:
        if not isinstance(name, str) or not name or "\x00" in name:
            raise StateVariableError(f"state variable name must be a non-empty string without "
                                     f"NUL, got {name!r}")
        ttl_ms = None if ttl is None else round(parse_duration(ttl, f"ttl of {name}") * 1000)
        if ttl_ms is not None and ttl_ms <= 0:
            raise StateVariableError(f"state {name}: ttl must be positive, got {ttl!r}")
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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Runs after the partition's state is committed."""


AnyProcessor: TypeAlias = StatefulProcessor | VectorizedStatefulProcessor
