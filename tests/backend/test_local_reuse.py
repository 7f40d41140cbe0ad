"""Cross-process local reuse: a store released by one process of a host is taken over by the
next one that loads exactly its (version, unique id), with no remote I/O; anything else
(another version, a corrupt or disagreeing marker, a dirty instance, a crash mid-transaction)
restores from the checkpoint as before."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.local.dirs import location_dir
from pyspark_dstl.backend.local.release_marker import MARKER_NAME, write_marker
from pyspark_dstl.backend.store.provider import STORES_DIR
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from tests.support import S3Env
from tests.support.backend import (
    MEMORY,
    OPERATOR,
    BackendEnv,
    apply,
    file_env,
    s3_env,
    state_of,
)

SPAWN = multiprocessing.get_context("spawn")  # never fork a process that opened RocksDB
CHILD_TIMEOUT = 120.0  # generous: a spawned interpreter imports the project first
Model = dict[bytes, bytes]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


def host_dir(env: BackendEnv) -> str:
    """One host's local directory, shared by the "processes" (backends) of a test."""
    return str(Path(env.local_dir) / "host")


def store_dir_of(env: BackendEnv) -> Path:
    return Path(location_dir(host_dir(env), env.url)) / STORES_DIR / OPERATOR / "0"


def markers(env: BackendEnv) -> list[Path]:
    return sorted(store_dir_of(env).glob(f"*/{MARKER_NAME}"))


def commit_batches(backend: StateBackend, env: BackendEnv, model: Model,
                   batches: list[dict[bytes, bytes | None]]) -> list[StoreCommit]:
    provider = env.provider(backend)
    infos: list[StoreCommit] = []
    for changes in batches:
        store = provider.get_store(infos[-1].version if infos else 0,
                                   infos[-1] if infos else None)
        apply(store, model, changes)
        infos.append(store.commit())
    return infos


def released_at_v2(env: BackendEnv, model: Model) -> list[StoreCommit]:
    """Two commits by one process of the host, which then lets the store go."""
    first = env.backend(local_dir=host_dir(env))
    infos = commit_batches(first, env, model, [{b"a": b"1", b"b": b"2"}, {b"b": None,
                                                                           b"c": b"3"}])
    first.close()
    return infos


def load(env: BackendEnv, target: StoreCommit | str, version: int = 2) -> Any:
    return env.provider(env.backend(local_dir=host_dir(env))).get_store(version, target)


def test_release_flushes_and_marks_the_directory_with_the_committed_info(
        env: BackendEnv) -> None:
    infos = released_at_v2(env, {})
    [marker] = markers(env)
    recorded = json.loads(marker.read_text())
    assert recorded["magic"] == "DSTL-RELEASED" and recorded["format_version"] == 2
    assert recorded["checksum"].startswith("sha256:")
    assert StoreCommit.from_dict(recorded["info"]) == infos[-1]


def test_the_next_process_takes_over_the_released_store_at_its_exact_version(
        env: BackendEnv) -> None:
    model: Model = {}
    infos = released_at_v2(env, model)
    store = load(env, infos[-1])
    assert store.metrics()["load_kind"] == "local_reuse"
    assert state_of(store) == model
    apply(store, model, {b"d": b"4"})
    info3 = store.commit()
    assert info3.lineage == (*infos[-1].lineage, (3, info3.unique_id))
    assert info3.changelog.from_sqn == infos[-1].changelog.from_sqn
    assert info3.changelog.to_sqn > infos[-1].changelog.to_sqn  # the writer continued
    restored = env.provider(env.backend()).get_store(3, info3)  # another host
    assert restored.metrics()["load_kind"] == "restore"
    assert state_of(restored) == model


def test_taking_over_by_version_and_unique_id_alone_uses_the_markers_info(
        env: BackendEnv) -> None:
    model: Model = {}
    infos = released_at_v2(env, model)
    store = load(env, infos[-1].unique_id)
    assert store.metrics()["load_kind"] == "local_reuse"
    apply(store, model, {b"e": b"5"})
    info3 = store.commit()
    assert info3.changelog.from_sqn == infos[-1].changelog.from_sqn
    assert state_of(env.provider(env.backend()).get_store(3, info3)) == model


def test_the_marker_is_gone_before_the_first_write_of_the_new_owner(env: BackendEnv) -> None:
    infos = released_at_v2(env, {})
    store = load(env, infos[-1])
    assert store.metrics()["load_kind"] == "local_reuse"
    assert markers(env) == []


def test_a_store_can_move_back_and_forth_between_processes(env: BackendEnv) -> None:
    model: Model = {}
    info = released_at_v2(env, model)[-1]
    for round_ in range(3):
        backend = env.backend(local_dir=host_dir(env))
        store = env.provider(backend).get_store(info.version, info)
        assert store.metrics()["load_kind"] == "local_reuse"
        apply(store, model, {b"r%d" % round_: b"x"})
        info = store.commit()
        backend.close()
    assert state_of(load(env, info, info.version)) == model


def test_a_released_directory_at_another_version_is_removed_and_the_store_restored(
        env: BackendEnv) -> None:
    model: Model = {}
    infos = released_at_v2(env, model)
    stale = [path.parent for path in markers(env)]
    store = load(env, infos[0], version=1)
    assert store.metrics()["load_kind"] == "restore"
    assert state_of(store) == {b"a": b"1", b"b": b"2"}
    assert not any(path.exists() for path in stale)


@pytest.mark.parametrize("damage", ["garbage", "checksum", "format_version"])
def test_a_corrupt_marker_is_never_taken_over(env: BackendEnv, damage: str) -> None:
    model: Model = {}
    infos = released_at_v2(env, model)
    [marker] = markers(env)
    recorded = json.loads(marker.read_text())
    if damage == "garbage":
        marker.write_text(marker.read_text()[:40])
    elif damage == "checksum":  # well-formed, but not what was checksummed
        recorded["info"]["base_unique_id"] = "f" * 32
        marker.write_text(json.dumps(recorded))
    else:
        recorded["format_version"] = 99
        marker.write_text(json.dumps(recorded))
    store = load(env, infos[-1])
    assert store.metrics()["load_kind"] == "restore"
    assert state_of(store) == model


def test_a_marker_that_disagrees_with_the_shipped_info_is_not_used(env: BackendEnv) -> None:
    model: Model = {}
    infos = released_at_v2(env, model)
    [marker] = markers(env)
    wrong = dataclasses.replace(infos[-1], changelog=ChangelogHandle.empty(
        infos[-1].store_id, infos[-1].changelog.to_sqn))
    write_marker(str(marker.parent), wrong)  # valid, but claims another state
    store = load(env, infos[-1])
    assert store.metrics()["load_kind"] == "restore"
    assert state_of(store) == model


def test_an_instance_with_an_aborted_flush_leaves_no_marker(env: BackendEnv) -> None:
    model: Model = {}
    backend = env.backend(local_dir=host_dir(env))
    [info] = commit_batches(backend, env, model, [{b"a": b"1"}])
    store = env.provider(backend).get_store(1, info)
    store.put(b"half", b"written")
    assert dict(store.iterator()) == {b"a": b"1", b"half": b"written"}  # flushed by the scan
    store.abort()
    backend.close()
    assert markers(env) == []
    restored = load(env, info, version=1)
    assert restored.metrics()["load_kind"] == "restore"
    assert state_of(restored) == model


def test_the_memory_provider_leaves_nothing_to_take_over(tmp_path: Path) -> None:
    made = file_env(tmp_path, MEMORY)
    try:
        model: Model = {}
        infos = released_at_v2(made, model)
        assert markers(made) == []
        store = load(made, infos[-1])
        assert store.metrics()["load_kind"] == "restore"
        assert state_of(store) == model
    finally:
        made.close()


# --- real processes on one host -------------------------------------------------------------


def child_conf(env: BackendEnv) -> dict[str, str]:
    """What a child process needs to open the same root, as plain Spark-style settings."""
    storage = env.changelog.storage
    conf = {"spark.dstl.stateStore.localDir": host_dir(env),
            "spark.dstl.changelog.persistDelay": "0ms",
            "spark.dstl.materialization.everyNCommits": "off",
            "spark.dstl.materialization.interval": "off"}
    if storage.s3_endpoint_url is not None:
        conf.update({"spark.dstl.changelog.s3.endpoint": storage.s3_endpoint_url,
                     "spark.dstl.changelog.s3.region": str(storage.s3_region),
                     "spark.dstl.changelog.s3.accessKeyId": str(storage.s3_access_key_id),
                     "spark.dstl.changelog.s3.secretAccessKey":
                         str(storage.s3_secret_access_key),
                     "spark.dstl.changelog.s3.addressingStyle": "path"})
    return conf


def _encode(state: Model) -> dict[str, str]:
    return {key.hex(): value.hex() for key, value in state.items()}


def _decode(state: dict[str, str | None]) -> dict[bytes, bytes | None]:
    return {bytes.fromhex(k): None if v is None else bytes.fromhex(v) for k, v in state.items()}


def _commit_and_release(conf: dict[str, str], url: str, batches: str,
                        out: Queue[str]) -> None:
    """Child: commit `batches` (JSON list of hex change maps) from version 0, then exit
    through the backend's close (which releases the store)."""
    backend = StateBackend(BackendSettings.from_mapping(conf))
    provider = backend.provider(url, OPERATOR, 0)
    info: StoreCommit | None = None
    for changes in json.loads(batches):
        store = provider.get_store(info.version if info else 0, info)
        for key, value in _decode(changes).items():
            store.remove(key) if value is None else store.put(key, value)
        info = store.commit()
    backend.close()
    assert info is not None
    out.put(json.dumps({"info": info.to_dict()}))


def _take_over_and_continue(conf: dict[str, str], url: str, info: str, changes: str,
                            go: Event, out: Queue[str]) -> None:
    """Child: load at `info`, report how and what; on `go`, commit `changes` and release."""
    backend = StateBackend(BackendSettings.from_mapping(conf))
    loaded = StoreCommit.from_dict(json.loads(info))
    store = backend.provider(url, OPERATOR, 0).get_store(loaded.version, loaded)
    out.put(json.dumps({"load_kind": store.metrics()["load_kind"],
                        "state": _encode(dict(store.iterator()))}))
    go.wait(CHILD_TIMEOUT)
    for key, value in _decode(json.loads(changes)).items():
        store.remove(key) if value is None else store.put(key, value)
    committed = store.commit()
    backend.close()
    out.put(json.dumps({"info": committed.to_dict()}))


def _take_over_and_hang(conf: dict[str, str], url: str, info: str, out: Queue[str]) -> None:
    """Child: take the store over, write into RocksDB (a flush), then wait to be killed."""
    backend = StateBackend(BackendSettings.from_mapping(conf))
    loaded = StoreCommit.from_dict(json.loads(info))
    store = backend.provider(url, OPERATOR, 0).get_store(loaded.version, loaded)
    store.put(b"never-committed", b"x")
    store.remove(b"a")
    list(store.iterator())  # flushes the transaction into RocksDB and the changelog
    out.put(json.dumps({"load_kind": store.metrics()["load_kind"]}))
    SPAWN.Event().wait()  # forever: the parent kills this process


def run_child(target: Any, *args: Any) -> tuple[Any, Queue[str]]:
    out: Queue[str] = SPAWN.Queue()
    process = SPAWN.Process(target=target, args=(*args, out), daemon=True)
    process.start()
    return process, out


def test_another_process_takes_over_a_released_store_with_no_remote_request(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        conf = child_conf(made)
        batches = [{b"a".hex(): b"1".hex(), b"b".hex(): b"2".hex()},
                   {b"b".hex(): None, b"c".hex(): b"3".hex()}]
        writer, out = run_child(_commit_and_release, conf, made.url, json.dumps(batches))
        released = StoreCommit.from_dict(json.loads(out.get(timeout=CHILD_TIMEOUT))["info"])
        writer.join(CHILD_TIMEOUT)
        assert writer.exitcode == 0
        assert s3.proxy.wait_idle()
        before = len(s3.proxy.log)
        go = SPAWN.Event()
        reader, out = run_child(_take_over_and_continue, conf, made.url,
                                json.dumps(released.to_dict()),
                                json.dumps({b"d".hex(): b"4".hex()}), go)
        loaded = json.loads(out.get(timeout=CHILD_TIMEOUT))
        assert loaded["load_kind"] == "local_reuse"
        assert len(s3.proxy.log) == before  # start-up and load sent no request at all
        assert _decode(loaded["state"]) == {b"a": b"1", b"c": b"3"}
        go.set()
        info3 = StoreCommit.from_dict(json.loads(out.get(timeout=CHILD_TIMEOUT))["info"])
        reader.join(CHILD_TIMEOUT)
        assert reader.exitcode == 0 and info3.version == 3
        assert len(s3.proxy.log) > before  # the commit itself did upload its changelog
        restored = made.provider(made.backend()).get_store(3, info3)  # another host
        assert state_of(restored) == {b"a": b"1", b"c": b"3", b"d": b"4"}
    finally:
        made.close()


def test_a_process_killed_mid_transaction_leaves_no_reusable_directory(
        env: BackendEnv) -> None:
    model: Model = {}
    released = released_at_v2(env, model)[-1]
    child, out = run_child(_take_over_and_hang, child_conf(env), env.url,
                           json.dumps(released.to_dict()))
    try:
        assert json.loads(out.get(timeout=CHILD_TIMEOUT))["load_kind"] == "local_reuse"
        assert markers(env) == []
    finally:
        child.kill()  # SIGKILL: no release, no atexit, the lock goes with the process
        child.join(CHILD_TIMEOUT)
    assert markers(env) == []
    store = load(env, released)
    assert store.metrics()["load_kind"] == "restore"
    assert state_of(store) == model
