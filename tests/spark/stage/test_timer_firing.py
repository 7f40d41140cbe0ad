"""Firing timers in one task (spark/stage/runner.py) on a real RocksDB store, without Spark:
which due timers reach the processor when handlers delete timers, and what the index holds
after a batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa

from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.processors.processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.stage.runner import BatchTimes, RunResult, run_processor
from pyspark_dstl.spark.time.timers import TimerIndex
from tests.support.backend import BackendEnv, env  # noqa: F401 - fixture

INPUT = pa.schema([("user", pa.string()), ("timers", pa.list_(pa.int64()))])
OUTPUT = pa.schema([("user", pa.string()), ("expiry", pa.int64())])


class Timers(StatefulProcessor):
    """Registers the timers its rows list; a fired timer emits (user, expiry) and applies
    the deletes and registrations `on_fire` names for that expiry."""

    def __init__(self, on_fire: dict[int, list[tuple[str, int]]] | None = None) -> None:
        self.on_fire = on_fire or {}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[tuple[Any, ...]]:
        for frame in rows:
            for expiries in frame["timers"]:
                for expiry in expiries:
                    self.handle.register_timer(int(expiry))
        return iter(())

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int
                             ) -> Iterator[tuple[Any, ...]]:
        for action, other in self.on_fire.get(expiry_ms, []):
            if action == "delete":
                self.handle.delete_timer(other)
            else:
                self.handle.register_timer(other)
        yield (key[0], expiry_ms)


class VectorizedTimers(VectorizedStatefulProcessor):
    """Emits every due timer as (user, expiry)."""

    def handle_batch(self, batch: Any) -> Iterator[pa.Table]:
        return iter(())

    def handle_expired_timers(self, timers: Any) -> Iterator[pa.Table]:
        yield pa.table({"user": [key[0] for key in timers.keys],
                        "expiry": pa.array(timers.expiry_ms, pa.int64())})


class Task:
    """Batches of one partition on one store, each committed before the next."""

    def __init__(self, root: BackendEnv) -> None:
        self.provider = root.provider(root.backend())
        self.info: Any = None

    def run(self, processor: Any, rows: dict[str, list[int]], now_ms: int) -> RunResult:
        store = self.store()
        table = pa.table({"user": list(rows), "timers": list(rows.values())}, schema=INPUT)
        result = run_processor(processor, store, table, ("user",), OUTPUT,
                               batch_id=0, partition_id=0,
                               times=BatchTimes(now_ms, time_mode="processing_time"),
                               grouping=KeyGrouping(("string",), KEY_GROUPS))
        self.info = store.commit()
        return result

    def store(self) -> StateStore:
        if self.info is None:
            return self.provider.get_store(0)
        return self.provider.get_store(self.info.version, self.info)

    def timers_left(self) -> list[tuple[bytes, int]]:
        store = self.store()
        try:
            return [(timer.key, timer.expiry_ms) for timer in TimerIndex(store).due(1 << 40)]
        finally:
            store.abort()


def fired(result: RunResult) -> list[tuple[str, int]]:
    return list(zip(result.output.column("user").to_pylist(),
                    result.output.column("expiry").to_pylist(), strict=True))


def test_a_timer_deleted_by_an_earlier_handler_of_the_batch_does_not_fire(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Task(env)
    task.run(Timers(), {"a": [10, 20], "b": [15]}, now_ms=1)
    result = task.run(Timers({10: [("delete", 20)]}), {}, now_ms=100)
    assert fired(result) == [("a", 10), ("b", 15)]
    assert result.timers_fired == 3  # due when the batch read them
    assert task.timers_left() == []


def test_a_timer_deleted_and_registered_again_by_an_earlier_handler_fires(
        env: BackendEnv) -> None:  # noqa: F811 - fixture
    task = Task(env)
    task.run(Timers(), {"a": [10, 20]}, now_ms=1)
    result = task.run(Timers({10: [("delete", 20), ("register", 20)]}), {}, now_ms=100)
    assert fired(result) == [("a", 10), ("a", 20)]
    assert task.timers_left() == []


def test_fired_timers_leave_the_index_and_later_ones_stay(env: BackendEnv  # noqa: F811
                                                           ) -> None:
    task = Task(env)
    task.run(Timers(), {"a": [10, 300], "b": [20]}, now_ms=1)
    result = task.run(VectorizedTimers(), {}, now_ms=100)
    assert fired(result) == [("a", 10), ("b", 20)]
    assert result.next_timer_ms == 300
    assert [expiry for _, expiry in task.timers_left()] == [300]
