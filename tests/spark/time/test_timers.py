"""Timers and the order of a batch, on a real RocksDB-backed store (no Spark needed).

`run_processor` is what every Spark task runs, so these tests pin transformWithState's order:
initial state, input rows, then every due timer (also for keys without rows), in expiry order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.codec.values import encode_key
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.processors.processor import (
    ExpiredTimers,
    StatefulProcessor,
    StatefulProcessorHandle,
    VectorizedStatefulProcessor,
)
from pyspark_dstl.spark.spark_errors import TimerError
from pyspark_dstl.spark.stage.runner import BatchTimes, RunResult, run_processor
from pyspark_dstl.spark.time.timers import TimerIndex, expiry_bytes

SCHEMA = pa.schema([("user", pa.string()), ("v", pa.int64())])
OUT = pa.schema([("user", pa.string()), ("event", pa.string()), ("at", pa.int64())])
OpenStore = Callable[[], StateStore]


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[OpenStore]:
    """Stores of one partition: each call loads the newest committed version."""
    backend = StateBackend(BackendSettings(local_dir=str(tmp_path / "local")))
    provider = backend.provider((tmp_path / "ckpt").as_uri(), "op", 0)
    committed: list[Any] = []

    def make() -> StateStore:
        if not committed:
            return provider.get_store(0)
        info = committed[-1]
        return provider.get_store(info.version, info)

    make.committed = committed  # type: ignore[attr-defined]
    yield make
    backend.close()


GROUPING = KeyGrouping(("string",), KEY_GROUPS)  # the tables' key column "user" is a string
GROUP = 0x0102  # the TimerIndex tests' keys share one key group: ordered by their msgpack bytes


def stored(user: str) -> bytes:
    return GROUPING.encode([(user,)])[0]


def rows(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table({"user": [p[0] for p in pairs], "v": [p[1] for p in pairs]},
                    schema=SCHEMA)


def run(open_store: OpenStore, processor: Any, table: pa.Table, times: BatchTimes,
        initial: pa.Table | None = None) -> RunResult:
    """One batch of one partition, committed."""
    store = open_store()
    result = run_processor(processor, store, table, ("user",), OUT, batch_id=0,
                           partition_id=0, times=times, initial_state=initial,
                           grouping=GROUPING)
    open_store.committed.append(store.commit())  # type: ignore[attr-defined]
    return result


def events(result: RunResult) -> list[tuple[str, str, int]]:
    return [tuple(r.values()) for r in result.output.to_pylist()]  # type: ignore[misc]


class Reminder(StatefulProcessor):
    """Each row's v is a timer to register; a negative v deletes timer -v."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handle_input_rows(self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame]
                          ) -> Iterator[Any]:
        for frame in rows:
            for v in frame["v"]:
                if v >= 0:
                    self.handle.register_timer(int(v))
                else:
                    self.handle.delete_timer(int(-v))
        yield (key[0], "rows", self.handle.processing_time_ms)

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Any]:
        yield (key[0], "timer", expiry_ms)

    def handle_initial_state(self, key: tuple[Any, ...], rows: pd.DataFrame) -> None:
        for v in rows["v"]:
            self.handle.register_timer(int(v))


def at(now_ms: int) -> BatchTimes:
    """A processing-time batch at `now_ms`."""
    return BatchTimes(now_ms=now_ms, time_mode="processing_time")


REGISTER = at(0)  # a batch before every timer of these tests is due
PROCESSING = at(100)


def test_timer_registered_already_due_fires_in_the_same_batch(open_store: OpenStore) -> None:
    result = run(open_store, Reminder(), rows(("a", 50)), PROCESSING)
    assert events(result) == [("a", "rows", 100), ("a", "timer", 50)]


def test_index_yields_due_timers_in_expiry_then_key_order(open_store: OpenStore) -> None:
    index = TimerIndex(open_store())
    for key, expiry in [(b"b", 5), (b"a", 5), (b"c", -3), (b"a", 9), (b"d", 10)]:
        index.register(encode_key((key.decode(),), GROUP), expiry)
    due = [(t.key, t.expiry_ms) for t in index.due(9)]
    assert due == [(encode_key(("c",), GROUP), -3), (encode_key(("a",), GROUP), 5),
                   (encode_key(("b",), GROUP), 5), (encode_key(("a",), GROUP), 9)]
    assert index.earliest() == -3


def test_index_lists_one_keys_timers_only(open_store: OpenStore) -> None:
    index = TimerIndex(open_store())
    index.register(encode_key(("a",), GROUP), 7)
    index.register(encode_key(("a",), GROUP), 3)
    index.register(encode_key(("ab",), GROUP), 1)  # a longer key must not leak into "a"
    assert index.of_key(encode_key(("a",), GROUP)) == [3, 7]


def test_deleted_timer_is_gone_from_both_orders(open_store: OpenStore) -> None:
    index = TimerIndex(open_store())
    key = encode_key(("a",), GROUP)
    index.register(key, 4)
    index.delete(key, 4)
    assert index.of_key(key) == [] and index.due(10) == [] and index.earliest() is None


@pytest.mark.parametrize("bad", [1.5, "soon", 1 << 63])
def test_expiry_must_be_whole_milliseconds_in_range(bad: Any) -> None:
    with pytest.raises(TimerError):
        expiry_bytes(bad)


def test_due_timer_fires_for_a_key_without_rows(open_store: OpenStore) -> None:
    run(open_store, Reminder(), rows(("a", 50)), REGISTER)
    result = run(open_store, Reminder(), rows(("b", 500)), at(60))
    assert events(result) == [("b", "rows", 60), ("a", "timer", 50)]
    assert result.timers_fired == 1 and result.next_timer_ms == 500


def test_timer_not_yet_due_waits_and_fires_once(open_store: OpenStore) -> None:
    run(open_store, Reminder(), rows(("a", 150)), PROCESSING)
    assert events(run(open_store, Reminder(), rows(), at(149))) == []
    fired = run(open_store, Reminder(), rows(), at(150))
    assert events(fired) == [("a", "timer", 150)]
    assert events(run(open_store, Reminder(), rows(), at(999))) == []


def test_timer_registered_and_deleted_in_one_batch_never_fires(open_store: OpenStore) -> None:
    result = run(open_store, Reminder(), rows(("a", 10), ("a", -10)), PROCESSING)
    assert events(result) == [("a", "rows", 100)]
    assert result.timers_fired == 0 and result.next_timer_ms is None


def test_input_rows_run_before_timers_so_they_can_cancel_them(open_store: OpenStore) -> None:
    run(open_store, Reminder(), rows(("a", 10)), REGISTER)
    result = run(open_store, Reminder(), rows(("a", -10)), PROCESSING)
    assert events(result) == [("a", "rows", 100)]


def test_event_time_timers_fire_at_the_watermark(open_store: OpenStore) -> None:
    times = BatchTimes(now_ms=10**12, watermark_ms=0, time_mode="event_time")
    run(open_store, Reminder(), rows(("a", 1000), ("b", 2000)), times)
    result = run(open_store, Reminder(), rows(),
                 BatchTimes(now_ms=10**12, watermark_ms=1500, time_mode="event_time"))
    assert events(result) == [("a", "timer", 1000)]


def test_event_time_timer_at_or_before_the_watermark_is_refused(open_store: OpenStore) -> None:
    with pytest.raises(TimerError, match="watermark 1500"):
        run(open_store, Reminder(), rows(("a", 1500)),
            BatchTimes(now_ms=0, watermark_ms=1500, time_mode="event_time"))


def test_timers_need_a_time_mode(open_store: OpenStore) -> None:
    with pytest.raises(TimerError, match="time_mode"):
        run(open_store, Reminder(), rows(("a", 5)), BatchTimes(now_ms=0))


def test_initial_state_runs_before_the_first_rows(open_store: OpenStore) -> None:
    result = run(open_store, Reminder(), rows(("b", 500)), PROCESSING,
                 initial=rows(("a", 20), ("c", 400)))
    assert events(result) == [("b", "rows", 100), ("a", "timer", 20)]
    assert result.next_timer_ms == 400


def test_timers_survive_commit_and_reload(open_store: OpenStore) -> None:
    run(open_store, Reminder(), rows(("a", 300), ("b", 200)), PROCESSING)
    store = open_store()
    assert [(t.key, t.expiry_ms) for t in TimerIndex(store).due(1000)] == [
        (stored("b"), 200), (stored("a"), 300)]
    store.abort()


class SecondTimerCanceller(Reminder):
    """Firing the first of a key's timers deletes its second, already due, timer."""

    def handle_expired_timer(self, key: tuple[Any, ...], expiry_ms: int) -> Iterator[Any]:
        for other in self.handle.list_timers():
            if other != expiry_ms:
                self.handle.delete_timer(other)
        yield (key[0], "timer", expiry_ms)


def test_timer_deleted_by_an_earlier_handler_does_not_fire(open_store: OpenStore) -> None:
    run(open_store, Reminder(), rows(("a", 10), ("a", 20)), REGISTER)
    result = run(open_store, SecondTimerCanceller(), rows(), PROCESSING)
    assert events(result) == [("a", "timer", 10)]


class VectorReminder(VectorizedStatefulProcessor):
    """Registers every row's v as a timer of its key; reports due timers as one frame."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handle_batch(self, batch: Any) -> Iterator[Any]:
        keys = [batch.keys[int(i)] for i in batch.group_ids]
        self.handle.register_timers(keys, batch.table.column("v").to_pylist())
        return iter(())

    def handle_expired_timers(self, timers: ExpiredTimers) -> Iterator[Any]:
        yield pd.DataFrame({"user": [k[0] for k in timers.keys], "event": "timer",
                            "at": timers.expiry_ms})


def test_vectorized_processor_gets_all_due_timers_at_once(open_store: OpenStore) -> None:
    run(open_store, VectorReminder(), rows(("a", 30), ("b", 10), ("a", 500)), REGISTER)
    result = run(open_store, VectorReminder(), rows(), at(40))
    assert events(result) == [("b", "timer", 10), ("a", "timer", 30)]
    assert result.next_timer_ms == 500
    assert isinstance(np.asarray(result.output.column("at")), np.ndarray)
