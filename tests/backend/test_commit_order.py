"""A commit returns once its changelog is durable; the local engine catches up behind it.

With `backgroundEngineWrite` (the default) the batch's RocksDB write runs on the instance's
writer thread after the commit returned. Everything that uses the engine afterwards must see
the committed version: the next transaction's reads, a snapshot started at that commit, a
release leaving the directory to the next process. A write that fails must not be lost
silently: the next load restores the version from the checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.naming import snapshot_path
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.support.backend import MEMORY, BackendEnv, apply, file_env, state_of
from tests.support.engine_faults import FAILING_PROVIDER, EngineFaults

BATCH = 20_000  # large enough that the engine write is still running when commit returns
EVERY_COMMIT = MaterializerSettings(interval=None, every_n_commits=1, backstop_bytes=1 << 40,
                                   worker_threads=2)
Model = dict[bytes, bytes]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path, FAILING_PROVIDER)
    EngineFaults.reset()
    yield made
    EngineFaults.reset()
    made.close()


def batch(round_: int, size: int = BATCH) -> dict[bytes, bytes | None]:
    return {b"key%06d" % i: b"round%d-%d" % (round_, i) for i in range(size)}


def host(env: BackendEnv) -> str:
    return str(Path(env.local_dir) / "host")


@pytest.mark.parametrize("background", [True, False], ids=["background", "in-commit"])
def test_the_next_transaction_reads_the_values_just_committed(env: BackendEnv,
                                                                background: bool) -> None:
    provider = env.provider(env.backend(background_engine_write=background))
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1))
    info = store.commit()
    again = provider.get_store(1, info)
    assert again.metrics()["load_kind"] == "reuse"
    assert again.get(b"key012345") == b"round1-12345"
    assert state_of(again) == model


def test_a_transaction_after_a_background_write_overwrites_it_in_commit_order(
        env: BackendEnv) -> None:
    provider = env.provider(env.backend())
    model: Model = {}
    info = None
    for round_ in range(1, 4):
        store = provider.get_store(round_ - 1, info)
        apply(store, model, batch(round_, BATCH // round_))
        info = store.commit()
    assert info is not None
    assert state_of(provider.get_store(3, info)) == model
    restored = env.provider(env.backend()).get_store(3, info)
    assert state_of(restored) == model


@pytest.mark.parametrize("provider", [FAILING_PROVIDER, MEMORY], ids=["rocksdb", "memory"])
def test_a_snapshot_started_at_a_commit_holds_that_commits_writes(env: BackendEnv,
                                                                  provider: str) -> None:
    env.materialization = EVERY_COMMIT
    env.provider_class = provider
    backend = env.backend()
    provider = env.provider(backend)
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1))
    info1 = store.commit()  # starts a background snapshot of version 1
    assert provider.wait_for_snapshot(timeout=60.0)
    info2 = provider.get_store(1, info1).commit()  # adopts it
    assert info2.materialized is not None and info2.materialized.version == 1
    restored = env.provider(env.backend()).get_store(2, info2)
    assert restored.metrics()["replayed_records"] == 0  # version 1 came from the snapshot
    assert state_of(restored) == model


def test_a_failed_background_write_makes_the_next_load_restore_from_the_checkpoint(
        env: BackendEnv, caplog: pytest.LogCaptureFixture) -> None:
    provider = env.provider(env.backend())
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1, 100))
    info1 = store.commit()
    store = provider.get_store(1, info1)
    apply(store, model, batch(2, 100))
    EngineFaults.fail_next_writes(1)
    info2 = store.commit()  # durable: the failure comes after, on the writer thread
    with caplog.at_level(logging.ERROR):
        again = provider.get_store(2, info2)
    assert EngineFaults.failed == 1
    assert again.metrics()["load_kind"] == "restore"
    assert state_of(again) == model
    assert any("version" in record.getMessage() and "injected write failure"
               in record.getMessage() for record in caplog.records)


def test_a_failed_background_write_fails_the_snapshot_started_at_that_commit(
        env: BackendEnv) -> None:
    env.materialization = EVERY_COMMIT
    provider = env.provider(env.backend())
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1, 100))
    EngineFaults.fail_next_writes(1)
    info1 = store.commit()
    assert provider.wait_for_snapshot(timeout=60.0)
    assert snapshot_path(info1.store_id, 1, info1.unique_id) not in env.paths()
    again = provider.get_store(1, info1)
    assert again.metrics()["load_kind"] == "restore"
    info2 = again.commit()
    assert info2.materialized is None or info2.materialized.version != 1
    assert state_of(env.provider(env.backend()).get_store(2, info2)) == model


def test_release_waits_for_the_background_write_before_leaving_the_directory(
        env: BackendEnv) -> None:
    first = env.backend(local_dir=host(env))
    provider = env.provider(first)
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1))
    info = store.commit()
    first.close()  # releases right after the commit returned
    taken = env.provider(env.backend(local_dir=host(env))).get_store(1, info)
    assert taken.metrics()["load_kind"] == "local_reuse"
    assert state_of(taken) == model


def test_a_release_after_a_failed_background_write_leaves_nothing_to_reuse(
        env: BackendEnv) -> None:
    first = env.backend(local_dir=host(env))
    provider = env.provider(first)
    model: Model = {}
    store = provider.get_store(0)
    apply(store, model, batch(1, 100))
    EngineFaults.fail_next_writes(1)
    info = store.commit()
    first.close()
    again = env.provider(env.backend(local_dir=host(env))).get_store(1, info)
    assert again.metrics()["load_kind"] == "restore"
    assert state_of(again) == model


def test_closing_the_backend_right_after_a_commit_keeps_it_restorable(tmp_path: Path) -> None:
    made = file_env(tmp_path)
    try:
        backend = StateBackend(made.options())
        provider = made.provider(backend)
        model: Model = {}
        store = provider.get_store(0)
        apply(store, model, batch(1))
        info = store.commit()
        backend.close()
        assert state_of(made.provider(made.backend()).get_store(1, info)) == model
    finally:
        made.close()
