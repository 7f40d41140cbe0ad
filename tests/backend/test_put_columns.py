"""put_many with columns (keys=, values=): the same state, reads and cache limits as put()
per key, and restores from columnar payloads mixed with version-1 ones."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import pyspark_dstl.backend.engines.rocksdb as rocksdb_engine
import pyspark_dstl.backend.store.instance as instance
from pyspark_dstl.backend.engines.columns import ColumnBlock
from pyspark_dstl.backend.engines.records import VersionMarker, encode_changes
from pyspark_dstl.backend.store.api import StateStore
from tests.support.backend import PROVIDER_IDS, PROVIDERS, BackendEnv, file_env, state_of


@pytest.fixture(params=PROVIDERS, ids=PROVIDER_IDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path, request.param)
    yield made
    made.close()


def _restored(env: BackendEnv, store: StateStore) -> dict[bytes, bytes]:
    info = store.commit()
    fresh = env.provider(env.backend()).get_store(info.version, info)
    try:
        return state_of(fresh)
    finally:
        fresh.abort()


def test_columns_write_what_the_same_puts_write(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    store.put_many(keys=[b"b", b"a", b""], values=[b"2", b"1", b"empty key"])
    assert store.multi_get([b"a", b"b", b""]) == [b"1", b"2", b"empty key"]
    assert _restored(env, store) == {b"a": b"1", b"b": b"2", b"": b"empty key"}


def test_the_last_of_a_key_written_twice_in_the_columns_wins(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    store.put_many(keys=[b"k", b"x", b"k"], values=[b"first", b"1", b"last"])
    assert store.get(b"k") == b"last"
    assert store.metrics()["cache_entries"] == 2
    assert _restored(env, store) == {b"k": b"last", b"x": b"1"}


def test_columns_over_keys_put_or_removed_earlier_in_the_transaction(env: BackendEnv) -> None:
    provider = env.provider(env.backend())
    store = provider.get_store(0)
    store.put_many(keys=[b"a", b"b", b"c"], values=[b"1", b"2", b"3"])
    info = store.commit()
    store = provider.get_store(1, info)
    store.remove(b"a")
    store.put(b"b", b"cached")
    store.put_many(keys=[b"a", b"b", b"d"], values=[b"back", b"over", b"new"])
    store.remove(b"c")
    assert store.multi_get([b"a", b"b", b"c", b"d"]) == [b"back", b"over", None, b"new"]
    assert _restored(env, store) == {b"a": b"back", b"b": b"over", b"d": b"new"}


def test_arrow_binary_arrays_are_columns(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    store.put_many(keys=pa.array([b"a", b"b"], pa.binary()),
                   values=pa.array([b"1", b"2"], pa.large_binary()), cf="counts")
    assert state_of(store, "counts") == {b"a": b"1", b"b": b"2"}


@pytest.mark.parametrize("limit", [{"tx_cache_max_entries": 7}, {"tx_cache_max_bytes": 500}])
def test_columns_flush_where_puts_per_key_flush(tmp_path: Path, limit: dict[str, int]) -> None:
    rng = random.Random(5)
    keys = [b"k%03d" % rng.randrange(40) for _ in range(120)]
    values = [rng.randbytes(rng.randrange(1, 30)) for _ in keys]
    flushes = []
    for columns in (False, True):
        env = file_env(tmp_path / str(columns))
        try:
            store = env.provider(env.backend(**limit)).get_store(0)
            if columns:
                store.put_many(keys=keys, values=values)
            else:
                for key, value in zip(keys, values, strict=True):
                    store.put(key, value)
            metrics = store.metrics()
            assert metrics["cache_entries"] < limit.get("tx_cache_max_entries", 1 << 30)
            assert metrics["cache_bytes"] < limit.get("tx_cache_max_bytes", 1 << 30)
            flushes.append(metrics["flushes"])
            assert _restored(env, store) == dict(zip(keys, values, strict=True))
        finally:
            env.close()
    assert flushes[1] >= flushes[0] > 2


def test_cache_accounting_after_columns_matches_puts_per_key(tmp_path: Path) -> None:
    keys = [b"a", b"bb", b"a", b"ccc"]
    values = [b"1", b"22", b"333", b""]
    metrics = []
    for columns in (False, True):
        env = file_env(tmp_path / str(columns))
        try:
            store = env.provider(env.backend()).get_store(0)
            store.put(b"zz", b"before")
            if columns:
                store.put_many(keys=keys, values=values)
            else:
                store.put_many(zip(keys, values, strict=True))
            metrics.append((store.metrics()["cache_entries"], store.metrics()["cache_bytes"]))
            store.abort()
        finally:
            env.close()
    assert metrics[0] == metrics[1]


def test_columns_of_unequal_length_are_refused_naming_the_store(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    with pytest.raises(ValueError, match=r"^store 'agg/0.*2 keys and 1 values"):
        store.put_many(keys=[b"a", b"b"], values=[b"1"])


def test_items_and_columns_together_are_refused(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    with pytest.raises(TypeError, match="items or keys/values, not both"):
        store.put_many([(b"a", b"1")], keys=[b"b"], values=[b"2"])
    with pytest.raises(TypeError, match="values is missing"):
        store.put_many(keys=[b"b"])


def test_a_column_of_anything_but_bytes_is_refused(env: BackendEnv) -> None:
    store = env.provider(env.backend()).get_store(0)
    with pytest.raises(TypeError, match="keys and values must be bytes, got str"):
        store.put_many(keys=["a"], values=[b"1"])


def _version_1(marker: VersionMarker, blocks: list[ColumnBlock]) -> bytes:
    """The payload the writer made before the columnar one."""
    return encode_changes(marker, [
        (block.cf, dict(zip(block.key_list(), block.value_list(), strict=True)))
        for block in blocks])


def test_a_changelog_of_version_1_and_columnar_payloads_restores(
        env: BackendEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints written before the columnar payload replay together with newer ones, also
    with both versions inside one commit (a flush of each)."""
    provider = env.provider(env.backend())
    model: dict[bytes, bytes] = {}
    info = None
    rng = random.Random(2)
    for version in range(6):
        store = provider.get_store(version, info)
        for flush in range(3):
            with monkeypatch.context() as patch:
                if (version + flush) % 2 == 0:
                    patch.setattr(instance, "encode_blocks", _version_1)
                for _ in range(4):
                    key = b"k%d" % rng.randrange(9)
                    if rng.random() < 0.3:
                        store.remove(key)
                        model.pop(key, None)
                    else:
                        model[key] = rng.randbytes(5)
                        store.put(key, model[key])
                list(store.prefix_scan(b""))  # a scan flushes the cache: one payload
        info = store.commit()
    assert info is not None
    fresh = env.provider(env.backend()).get_store(info.version, info)
    assert fresh.metrics()["replayed_records"] > 0
    assert state_of(fresh) == model


@pytest.mark.parametrize("ordered", [True, False], ids=["in key order", "any order"])
def test_columns_that_fill_the_cache_alone_go_straight_to_the_engine_and_changelog(
        tmp_path: Path, ordered: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices that fill an empty cache by themselves are flushed from their columns (as table
    files when large): the state, read-your-writes and a restore are what puts give, a key
    written twice keeps its last value, and writes cached before still win in order."""
    monkeypatch.setattr(rocksdb_engine, "TABLE_FILE_BYTES", 0)
    rng = random.Random(8)
    keys = sorted({b"k%05d" % rng.randrange(100_000) for _ in range(3000)})
    if not ordered:
        rng.shuffle(keys)
        keys += keys[:50]  # written again later in the same write
    values = [rng.randbytes(rng.randrange(0, 40)) for _ in keys]
    env = file_env(tmp_path)
    try:
        provider = env.provider(env.backend(tx_cache_max_entries=500))
        store = provider.get_store(0)
        store.put_many(keys=keys, values=values)
        expected = dict(zip(keys, values, strict=True))
        assert store.metrics()["flushes"] >= len(keys) // 500 - 1
        assert store.multi_get(keys[:100]) == [expected[key] for key in keys[:100]]
        store.put(keys[0], b"after")
        expected[keys[0]] = b"after"
        assert state_of(store) == expected
        assert _restored(env, store) == expected
    finally:
        env.close()
