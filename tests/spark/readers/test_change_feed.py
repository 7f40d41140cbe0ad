"""A committed batch's changes, read back from the changelog: exactly the commit its entry
names (never another attempt's), each key's last write of the batch, whether the commit's
files are named by its handle or, after a synchronous snapshot, found by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import LineageError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.spark.readers.change_feed import BatchCommit, batch_writes
from tests.support.backend import BackendEnv, entry_of, file_env

CF = "value/count"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


def commit(env: BackendEnv, base: StoreCommit | None, writes: list[tuple[bytes, bytes | None]],
           *, cache_entries: int = 100_000, materialize: bool = False,
           aborted: bool = False) -> StoreCommit:
    provider = env.provider(env.backend(tx_cache_max_entries=cache_entries))
    store = provider.get_store(base.version if base else 0, base)
    for key, value in writes:
        if value is None:
            store.remove(key, CF)
        else:
            store.put(key, value, CF)
    if aborted:
        store.abort()
        return base  # type: ignore[return-value]
    return store.commit(materialize=materialize)


def changes(env: BackendEnv, batch_id: int, info: StoreCommit) -> dict[bytes, bytes | None]:
    return batch_writes(env.storage, BatchCommit.of(batch_id, info), [CF])[CF]


def test_a_batch_shows_each_keys_last_write_of_that_batch_only(env: BackendEnv) -> None:
    first = commit(env, None, [(b"a", b"1"), (b"b", b"1")])
    second = commit(env, first, [(b"a", b"2"), (b"a", b"3"), (b"b", None), (b"c", b"1")])
    assert changes(env, 0, first) == {b"a": b"1", b"b": b"1"}
    assert changes(env, 1, second) == {b"a": b"3", b"b": None, b"c": b"1"}


def test_writes_flushed_in_several_parts_of_one_commit_net_to_the_last(
        env: BackendEnv) -> None:
    writes = [(b"k%d" % (i % 3), b"%d" % i) for i in range(10)] + [(b"k1", None)]
    info = commit(env, None, writes, cache_entries=2)  # a flush every two keys
    assert changes(env, 0, info) == {b"k0": b"9", b"k1": None, b"k2": b"8"}


def test_an_aborted_attempt_and_a_losing_attempt_of_the_batch_are_never_read(
        env: BackendEnv) -> None:
    first = commit(env, None, [(b"a", b"1")])
    commit(env, first, [(b"a", b"aborted")], cache_entries=1, aborted=True)
    commit(env, first, [(b"a", b"lost"), (b"z", b"lost")])  # an attempt no entry names
    winner = commit(env, first, [(b"a", b"won")])
    env.commit_log().write(0, entry_of(0, first))
    env.commit_log().write(1, entry_of(1, winner))
    assert changes(env, 1, env.commit_log().read(1).operators["agg"].stores[0]) == {
        b"a": b"won"}


def test_a_commit_that_adopted_a_synchronous_snapshot_is_read_from_its_files_by_name(
        env: BackendEnv) -> None:
    first = commit(env, None, [(b"a", b"1")])
    second = commit(env, first, [(b"a", b"2"), (b"b", b"2")], materialize=True)
    assert second.changelog.is_empty  # the snapshot holds everything: the handle names nothing
    assert BatchCommit.of(1, second).segments is None
    assert changes(env, 1, second) == {b"a": b"2", b"b": b"2"}


def test_a_change_set_of_another_commit_in_the_named_files_is_refused_by_name(
        env: BackendEnv) -> None:
    first = commit(env, None, [(b"a", b"1")])
    second = commit(env, first, [(b"a", b"2")])
    wrong = BatchCommit.of(1, second)
    forged = BatchCommit(1, wrong.store_id, wrong.version, wrong.unique_id, "someone-else",
                         wrong.segments)
    with pytest.raises(LineageError, match=r"not of the commit of batch 1 \(version 2"):
        batch_writes(env.storage, forged, [CF])
