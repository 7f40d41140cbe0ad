"""The behavioural suite every provider passes, on file:// and on the S3 API."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import (
    StateStoreClosedError,
    StoreIdError,
    StoreLockedError,
)
from pyspark_dstl.backend.local.dirs import LOCK_NAME, location_dir
from pyspark_dstl.backend.store.provider import STORES_DIR
from tests.support import S3Env
from tests.support.backend import (
    MEMORY,
    OPERATOR,
    PROVIDER_IDS,
    PROVIDERS,
    ROCKSDB,
    BackendEnv,
    apply,
    env,  # noqa: F401 - fixture
    file_env,
    s3_env,
    state_of,
)

KINDS = [(provider, kind) for provider in PROVIDERS for kind in ("file", "s3")]
KIND_IDS = [f"{pid}-{kind}" for pid in PROVIDER_IDS for kind in ("file", "s3")]


@pytest.fixture(params=KINDS, ids=KIND_IDS)
def any_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendEnv]:
    provider, kind = request.param
    if kind == "s3":
        made = s3_env(request.getfixturevalue("s3"), tmp_path, provider)
    else:
        made = file_env(tmp_path, provider)
    yield made
    made.close()


def test_version_zero_is_the_empty_store(any_env: BackendEnv) -> None:
    store = any_env.provider(any_env.backend()).get_store(0)
    assert store.version == 0
    assert store.get(b"k") is None
    assert state_of(store) == {}
    assert store.column_families() == []


def test_commit_produces_the_next_version_with_a_fresh_unique_id(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    first = provider.get_store(0)
    first.put(b"k", b"v")
    info1 = first.commit()
    second = provider.get_store(1, info1.unique_id)
    info2 = second.commit()
    assert (info1.version, info2.version) == (1, 2)
    assert info1.unique_id == first.unique_id and info2.unique_id == second.unique_id
    assert info2.base_unique_id == info1.unique_id
    assert info1.base_unique_id is None
    assert info1.unique_id != info2.unique_id


def test_get_reads_the_transactions_own_writes(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    info = store.commit()
    store = provider.get_store(1, info)
    store.put(b"a", b"changed")
    store.remove(b"b")
    store.put(b"c", b"3")
    assert (store.get(b"a"), store.get(b"b"), store.get(b"c")) == (b"changed", None, b"3")


def test_prefix_scan_returns_matching_keys_in_order_including_uncommitted_writes(
        any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put_many([(b"user/2", b"b"), (b"user/1", b"a"), (b"other", b"x")])
    info = store.commit()
    store = provider.get_store(1, info)
    store.put(b"user/0", b"new")
    store.remove(b"user/2")
    assert list(store.prefix_scan(b"user/")) == [(b"user/0", b"new"), (b"user/1", b"a")]


def test_column_families_are_separate_namespaces(any_env: BackendEnv) -> None:
    store = any_env.provider(any_env.backend()).get_store(0)
    store.put(b"k", b"default value")
    store.put(b"k", b"count value", cf="counts")
    store.put(b"z", b"timer", cf="timers")
    assert store.get(b"k") == b"default value"
    assert store.get(b"k", cf="counts") == b"count value"
    assert store.get(b"z") is None
    assert state_of(store, "counts") == {b"k": b"count value"}
    assert store.column_families() == ["counts", "default", "timers"]


def test_multi_get_mixes_written_and_stored_values(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put_many([(b"a", b"1"), (b"b", b"2")])
    info = store.commit()
    store = provider.get_store(1, info)
    store.put(b"c", b"3")
    store.remove(b"a")
    assert store.multi_get([b"a", b"b", b"c", b"d"]) == [None, b"2", b"3", None]


def test_remove_many_deletes_every_key(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    info = store.commit()
    store = provider.get_store(1, info)
    store.remove_many([b"a", b"c"])
    assert state_of(store) == {b"b": b"2"}


def test_a_new_process_restores_the_committed_state_from_the_checkpoint_info(
        any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    model: dict[bytes, bytes] = {}
    info = None
    for version in range(3):
        store = provider.get_store(version, info)
        apply(store, model, {b"k%d" % version: b"v%d" % version, b"k0": b"x%d" % version})
        info = store.commit()
    restored = any_env.provider(any_env.backend()).get_store(3, info)
    assert restored.metrics()["load_kind"] == "restore"
    assert state_of(restored) == model


def test_a_new_process_restores_from_version_and_unique_id_alone(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    model: dict[bytes, bytes] = {}
    store = provider.get_store(0)
    apply(store, model, {b"a": b"1", b"b": b"2"})
    info = store.commit()
    store = provider.get_store(1, info.unique_id)
    apply(store, model, {b"a": None, b"c": b"3"})
    info = store.commit()
    restored = any_env.provider(any_env.backend()).get_store(2, info.unique_id)
    assert restored.metrics()["load_kind"] == "restore_from_files"
    assert state_of(restored) == model


def test_a_snapshot_restores_without_replaying_changes(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put_many((b"key%04d" % i, b"value%d" % i) for i in range(500))
    info = store.commit(materialize=True)
    assert info.materialized is not None and info.materialized.version == 1
    restored = any_env.provider(any_env.backend()).get_store(1, info)
    assert restored.metrics()["replayed_change_sets"] == 0
    assert len(state_of(restored)) == 500
    assert restored.get(b"key0042") == b"value42"


def test_abort_before_any_flush_keeps_the_open_copy(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put(b"a", b"1")
    info = store.commit()
    attempt = provider.get_store(1, info)
    attempt.put(b"a", b"dropped")
    attempt.abort()
    again = provider.get_store(1, info)
    assert again.metrics()["load_kind"] == "reuse"
    assert state_of(again) == {b"a": b"1"}


def test_abort_after_a_flush_reloads_the_committed_state(any_env: BackendEnv) -> None:
    backend = any_env.backend(tx_cache_max_entries=2)
    provider = any_env.provider(backend)
    store = provider.get_store(0)
    store.put(b"a", b"1")
    info = store.commit()
    attempt = provider.get_store(1, info)
    attempt.put_many([(b"a", b"dropped"), (b"b", b"dropped"), (b"c", b"dropped")])
    attempt.abort()
    again = provider.get_store(1, info)
    assert again.metrics()["load_kind"] == "restore"
    assert state_of(again) == {b"a": b"1"}


def test_a_transaction_larger_than_the_cache_flushes_early_and_replays_in_order(
        any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend(tx_cache_max_entries=7))
    model: dict[bytes, bytes] = {}
    store = provider.get_store(0)
    for round_ in range(5):
        apply(store, model, {b"k%02d" % (i % 13): b"r%d-%d" % (round_, i) for i in range(11)})
        apply(store, model, {b"k%02d" % (round_ * 2): None})
    info = store.commit()
    assert store.metrics()["flushes"] > 2
    restored = any_env.provider(any_env.backend()).get_store(1, info)
    assert state_of(restored) == model


def test_a_finished_store_refuses_further_use(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.commit()
    with pytest.raises(StateStoreClosedError):
        store.put(b"k", b"v")
    with pytest.raises(StateStoreClosedError):
        store.commit()


def test_a_version_above_zero_needs_a_unique_id(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    with pytest.raises(StoreIdError, match="version 3 needs a unique id"):
        provider.get_store(3)


def test_loading_the_open_version_again_does_no_storage_requests(s3: S3Env,
                                                                  tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        provider = made.provider(made.backend())
        store = provider.get_store(0)
        store.put(b"k", b"v")
        info = store.commit()
        s3.proxy.wait_idle()
        before = len(s3.proxy.log)
        reused = provider.get_store(1, info)
        assert reused.get(b"k") == b"v"
        assert reused.metrics()["load_kind"] == "reuse"
        assert len(s3.proxy.log) == before
    finally:
        made.close()


@pytest.mark.parametrize("writer,reader", [(MEMORY, ROCKSDB), (ROCKSDB, MEMORY)],
                         ids=["memory-to-rocksdb", "rocksdb-to-memory"])
def test_providers_read_each_others_checkpoints(tmp_path: Path, writer: str,
                                                reader: str) -> None:
    made = file_env(tmp_path, writer)
    try:
        store = made.provider(made.backend()).get_store(0)
        store.put_many([(b"a", b"1"), (b"b", b"2")])
        store.put(b"t", b"x", cf="timers")
        info = store.commit(materialize=True)
        store = made.provider(made.backend()).get_store(1, info)
        store.put(b"c", b"3")
        info = store.commit()
        made.provider_class = reader
        restored = made.provider(made.backend()).get_store(2, info)
        assert state_of(restored) == {b"a": b"1", b"b": b"2", b"c": b"3"}
        assert state_of(restored, "timers") == {b"t": b"x"}
    finally:
        made.close()


def test_a_store_locked_by_another_process_is_not_opened(env: BackendEnv) -> None:  # noqa: F811
    local_dir = str(Path(env.local_dir) / "shared-host")
    store_dir = Path(location_dir(local_dir, env.url)) / STORES_DIR / OPERATOR / "0"
    store_dir.mkdir(parents=True)
    holder = textwrap.dedent(f"""
        import fcntl, sys, time
        handle = open({str(store_dir / LOCK_NAME)!r}, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.read()
    """)
    process = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        provider = env.provider(env.backend(local_dir=local_dir, lock_timeout=0.2))
        with pytest.raises(StoreLockedError, match="locked by another process"):
            provider.get_store(0)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)


@pytest.fixture(params=PROVIDERS, ids=PROVIDER_IDS)
def local_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path, request.param)
    yield made
    made.close()


def test_put_many_coalesces_per_key_like_puts_in_order(local_env: BackendEnv) -> None:
    provider = local_env.provider(local_env.backend())
    store = provider.get_store(0)
    store.put(b"a", b"first")
    store.remove(b"b")
    store.put_many([(b"a", b"second"), (b"b", b"back"), (b"c", b"1"), (b"c", b"2")])
    store.put_many(iter([(b"x", b"in cf")]), cf="other")
    assert (store.get(b"a"), store.get(b"b"), store.get(b"c")) == (b"second", b"back", b"2")
    assert store.metrics()["cache_entries"] == 4
    info = store.commit()
    assert store.metrics()["records_written"] == 4
    restored = local_env.provider(local_env.backend()).get_store(1, info)
    assert state_of(restored) == {b"a": b"second", b"b": b"back", b"c": b"2"}
    assert state_of(restored, "other") == {b"x": b"in cf"}


def test_put_many_and_remove_many_check_like_put_and_remove(local_env: BackendEnv) -> None:
    provider = local_env.provider(local_env.backend())
    store = provider.get_store(0)
    for bad_cf in ("", "nul\x00inside", 7, ["unhashable"]):
        with pytest.raises(StoreIdError, match="column family name"):
            store.put_many([], cf=bad_cf)  # type: ignore[arg-type]
        with pytest.raises(StoreIdError, match="column family name"):
            store.remove_many([b"k"], cf=bad_cf)  # type: ignore[arg-type]
        with pytest.raises(StoreIdError, match="column family name"):
            store.put(b"k", b"v", cf=bad_cf)  # type: ignore[arg-type]
        with pytest.raises(StoreIdError, match="column family name"):
            store.get(b"k", cf=bad_cf)  # type: ignore[arg-type]
    store_name = repr(store.store_id)
    with pytest.raises(TypeError, match=f"store {store_name}: keys and values must be bytes"):
        store.put_many([(b"ok", b"1"), ("text", b"2"), (b"never", b"3")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=f"store {store_name}: keys must be bytes"):
        store.remove_many([b"gone", bytearray(b"k")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="keys and values must be bytes, got bytes / str"):
        store.put(b"k", "v")  # type: ignore[arg-type]
    # the writes before the bad item stand, as with a put per item; the counts stay right
    assert (store.get(b"ok"), store.get(b"gone"), store.get(b"never")) == (b"1", None, None)
    assert store.metrics()["cache_entries"] == 2
    store.abort()
    for call in (lambda: store.put_many([(b"k", b"v")]), lambda: store.remove_many([b"k"]),
                 lambda: store.put(b"k", b"v"), lambda: store.remove(b"k"),
                 lambda: store.get(b"k")):
        with pytest.raises(StateStoreClosedError):
            call()


def test_keys_and_values_of_a_bytes_subclass_are_stored_as_bytes(local_env: BackendEnv) -> None:
    class Key(bytes):
        pass

    store = local_env.provider(local_env.backend()).get_store(0)
    store.put(Key(b"a"), Key(b"1"))
    store.put_many([(Key(b"b"), Key(b"2"))])
    store.remove(Key(b"c"))
    assert [type(value) for value in (store.get(b"a"), store.get(Key(b"b")))] == [bytes, bytes]
    assert state_of(store) == {b"a": b"1", b"b": b"2"}


@pytest.mark.parametrize("limit", [{"tx_cache_max_entries": 3},
                                   {"tx_cache_max_bytes": 200}])
def test_put_many_and_remove_many_flush_when_the_cache_is_full(local_env: BackendEnv,
                                                               limit: dict[str, int]) -> None:
    provider = local_env.provider(local_env.backend(**limit))
    store = provider.get_store(0)
    store.put_many((b"key%02d" % i, b"v" * 40) for i in range(10))
    store.remove_many(b"key%02d" % i for i in range(0, 10, 2))
    metrics = store.metrics()
    assert metrics["flushes"] >= 3
    assert metrics["cache_entries"] < 3 and metrics["cache_bytes"] < 200
    info = store.commit()
    expected = {b"key%02d" % i: b"v" * 40 for i in range(1, 10, 2)}
    assert state_of(local_env.provider(local_env.backend()).get_store(1, info)) == expected


def test_reads_take_any_bytes_like_key(local_env: BackendEnv) -> None:
    provider = local_env.provider(local_env.backend())
    store = provider.get_store(0)
    store.put(b"stored", b"1")
    info = store.commit()
    store = provider.get_store(1, info)
    store.put(b"cached", b"2")
    for key, value in ((b"stored", b"1"), (b"cached", b"2")):
        assert store.get(bytearray(key)) == value
        assert store.get(memoryview(key)) == value
    assert store.multi_get([bytearray(b"stored"), memoryview(b"cached"), b"none"]) == [
        b"1", b"2", None]


def test_metrics_count_this_transactions_updates_and_removes(any_env: BackendEnv) -> None:
    provider = any_env.provider(any_env.backend())
    store = provider.get_store(0)
    store.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    info = store.commit()
    assert (store.metrics()["rows_updated"], store.metrics()["rows_removed"]) == (3, 0)
    store = provider.get_store(1, info)
    store.remove(b"a")
    store.remove(b"b")
    store.put(b"b", b"back")  # a put over this transaction's delete is an update
    store.put(b"a", b"x")
    store.remove(b"a")  # and a delete over its put is a delete
    store.commit()
    metrics = store.metrics()
    assert (metrics["rows_updated"], metrics["rows_removed"]) == (1, 1)
    assert metrics["memory_bytes"] > 0 and metrics["disk_bytes"] >= 0


def test_metrics_split_a_commit_into_its_final_flush_and_the_upload_wait(
        any_env: BackendEnv) -> None:
    store = any_env.provider(any_env.backend()).get_store(0)
    store.put_many([(b"k%d" % i, b"v") for i in range(100)])
    store.commit()
    metrics = store.metrics()
    flush, wait = metrics["commit_flush_seconds"], metrics["commit_upload_wait_seconds"]
    assert flush > 0 and wait > 0
    assert flush + wait <= metrics["last_commit_seconds"]
