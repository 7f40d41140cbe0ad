"""Value, list and map state on a real RocksDB-backed store (no Spark needed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.backend.store.api import StateStore
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.processors.processor import StatefulProcessorHandle
from pyspark_dstl.spark.processors.state_variables import KeyContext
from pyspark_dstl.spark.spark_errors import StateVariableError

GROUPING = KeyGrouping(("string",), KEY_GROUPS)  # keys the tests pass: one string column
OpenHandle = Callable[[int], tuple[StatefulProcessorHandle, KeyContext, StateStore]]


@pytest.fixture
def open_handle(tmp_path: Path) -> Iterator[OpenHandle]:
    """A handle on a fresh store at version 0; now_ms is the clock of every TTL."""
    backend = StateBackend(BackendSettings(local_dir=str(tmp_path / "local")))
    provider = backend.provider((tmp_path / "ckpt").as_uri(), "op", 0)
    stores: list[StateStore] = []

    def make(now_ms: int) -> tuple[StatefulProcessorHandle, KeyContext, StateStore]:
        store = provider.get_store(0)
        stores.append(store)
        context = KeyContext(now_ms, grouping=GROUPING)
        return StatefulProcessorHandle(store, context, batch_id=0, partition_id=0), context, store

    yield make
    for store in stores:
        store.abort()
    backend.close()


def stored(*key: object) -> bytes:
    """A key's stored bytes, as the batch's keys and the bulk methods have them."""
    return GROUPING.encode([key])[0]


def at_key(context: KeyContext, *key: object) -> None:
    context.current = stored(*key)


def test_value_state_is_per_grouping_key(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    count = handle.get_value_state("count")
    at_key(context, "a")
    count.update(3)
    at_key(context, "b")
    assert count.get() is None and not count.exists()
    count.update(5)
    at_key(context, "a")
    assert count.get() == 3
    count.clear()
    assert count.get(default=0) == 0


def test_value_state_prefetches_the_batch_keys_and_sees_its_own_writes(
        open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    count = handle.get_value_state("count")
    context.batch_keys = [stored("a"), stored("b")]
    count.update_many([("a",), ("b",)], [1, 2])
    at_key(context, "a")
    assert count.get() == 1
    count.update(10)
    assert count.get() == 10
    at_key(context, "b")
    count.clear()
    assert not count.exists()
    assert count.get_many([("a",), ("b",), ("c",)], default=-1) == [10, -1, -1]


def test_numbers_written_as_a_column_are_the_bytes_and_values_of_single_writes(
        open_handle: OpenHandle) -> None:
    handle, context, store = open_handle(0)
    bulk, single = handle.get_value_state("bulk"), handle.get_value_state("single")
    values = [0, 200, -5, 2**40, -(2**40)]
    keys = [(name,) for name in "abcde"]
    bulk.update_many(keys, np.array(values))
    for key, value in zip(keys, values, strict=True):
        at_key(context, key[0])
        single.update(value)
    assert [store.get(stored(k[0]), "value/bulk") for k in keys] == \
        [store.get(stored(k[0]), "value/single") for k in keys]
    assert bulk.get_many([*keys, ("z",)], default=0) == [*values, 0]
    assert all(type(v) is int for v in bulk.get_many(keys))


def test_values_of_mixed_types_are_written_and_read_one_by_one(open_handle: OpenHandle) -> None:
    handle, _, _ = open_handle(0)
    state = handle.get_value_state("mixed")
    state.update_many([("a",), ("b",), ("c",)], [1, "two", [3.0]])
    assert state.get_many([("a",), ("b",), ("c",)]) == [1, "two", [3.0]]


def test_expired_value_is_invisible_and_removed_when_touched(open_handle: OpenHandle) -> None:
    handle, context, store = open_handle(1_000)
    seen = handle.get_value_state("seen", ttl="2s")
    at_key(context, "a")
    seen.update("x")
    assert seen.get() == "x"
    context.now_ms = 2_999
    assert seen.get() == "x"
    context.now_ms = 3_000
    assert seen.get() is None
    assert store.get(stored("a"), "value/seen") is None


def test_update_refreshes_the_ttl(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    seen = handle.get_value_state("seen", ttl=1.0)
    at_key(context, "a")
    seen.update(1)
    context.now_ms = 900
    seen.update(2)
    context.now_ms = 1_500
    assert seen.get() == 2


def test_get_many_hides_and_removes_expired_values(open_handle: OpenHandle) -> None:
    handle, context, store = open_handle(0)
    seen = handle.get_value_state("seen", ttl="1s")
    seen.update_many([("a",), ("b",)], [1, 2])
    context.now_ms = 500
    seen.update_many([("b",)], [3])
    context.now_ms = 1_200
    assert seen.get_many([("a",), ("b",)]) == [None, 3]
    assert store.get(stored("a"), "value/seen") is None


def test_list_state_appends_puts_and_clears(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    events = handle.get_list_state("events")
    at_key(context, "a")
    assert list(events.get()) == [] and not events.exists()
    events.append_value({"t": 1})
    events.append_list([2, "three"])
    assert list(events.get()) == [{"t": 1}, 2, "three"]
    events.put([9])
    assert list(events.get()) == [9]
    events.clear()
    assert not events.exists()


def test_list_state_drops_expired_elements_only(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    events = handle.get_list_state("events", ttl="1s")
    at_key(context, "a")
    events.append_value("old")
    context.now_ms = 600
    events.append_value("new")
    context.now_ms = 1_100
    assert list(events.get()) == ["new"]
    context.now_ms = 1_599
    assert list(events.get()) == ["new"]
    context.now_ms = 1_600
    assert not events.exists()


def test_map_state_entries_belong_to_one_grouping_key(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    pages = handle.get_map_state("pages")
    at_key(context, "a")
    pages.update_value("home", 1)
    pages.update_value(("shop", 2), [1, 2])
    at_key(context, "ab")
    pages.update_value("home", 99)
    at_key(context, "a")
    assert dict(pages.iterator()) == {"home": 1, ("shop", 2): [1, 2]}
    assert sorted(map(str, pages.keys())) == ["('shop', 2)", "home"]
    assert pages.get_value("home") == 1 and pages.contains_key(("shop", 2))
    pages.remove_key("home")
    assert not pages.contains_key("home")
    pages.clear()
    assert not pages.exists()
    at_key(context, "ab")
    assert list(pages.values()) == [99]


def test_map_state_hides_expired_entries(open_handle: OpenHandle) -> None:
    handle, context, _ = open_handle(0)
    pages = handle.get_map_state("pages", ttl="1s")
    at_key(context, "a")
    pages.update_value("x", 1)
    context.now_ms = 700
    pages.update_value("y", 2)
    context.now_ms = 1_000
    assert dict(pages.iterator()) == {"y": 2}
    assert pages.get_value("x") is None


def test_state_variable_cannot_change_kind(open_handle: OpenHandle) -> None:
    handle, _, _ = open_handle(0)
    handle.get_value_state("s")
    assert handle.get_value_state("s") is handle.get_value_state("s")
    with pytest.raises(StateVariableError, match="already declared as value"):
        handle.get_list_state("s")


def test_per_key_access_outside_a_key_is_an_error(open_handle: OpenHandle) -> None:
    handle, _, _ = open_handle(0)
    with pytest.raises(StateVariableError, match="no current grouping key"):
        handle.get_value_state("count").get()


def test_state_survives_commit_and_reload(open_handle: OpenHandle, tmp_path: Path) -> None:
    handle, context, store = open_handle(0)
    handle.get_value_state("count").update_many([("a",), ("b",)], [1, 2])
    at_key(context, "a")
    handle.get_map_state("m").update_value("k", "v")
    info = store.commit()
    backend = StateBackend(BackendSettings(local_dir=str(tmp_path / "other")))
    try:
        reloaded = backend.provider((tmp_path / "ckpt").as_uri(), "op", 0).get_store(1, info)
        context2 = KeyContext(0, grouping=GROUPING)
        handle2 = StatefulProcessorHandle(reloaded, context2, batch_id=1, partition_id=0)
        assert handle2.get_value_state("count").get_many([("a",), ("b",)]) == [1, 2]
        at_key(context2, "a")
        assert handle2.get_map_state("m").get_value("k") == "v"
        reloaded.abort()
    finally:
        backend.close()
