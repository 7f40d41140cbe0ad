"""Retention under random histories: commits, attempts that lose, aborts, restarts,
snapshots (forced and periodic) and cleanups. After every cleanup each retained checkpoint
loads to the model's state, and nothing unreferenced is left below the retained range."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.lineage.store_listing import list_store_dir
from pyspark_dstl.backend.ops.cleanup import (
    MIN_INCOMPLETE_GRACE,
    CleanupReport,
    cleanup_checkpoint,
    default_incomplete_grace,
)
from pyspark_dstl.backend.ops.verify import verify_checkpoint
from pyspark_dstl.changelog.changelog_errors import PermanentStorageError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.materializer.names import parse_uploaded_version
from tests.support.backend import OPERATOR, BackendEnv, apply, entry_of, file_env, state_of

STORE = f"{OPERATOR}/0"
KEYS = [b"k%d" % i for i in range(6)]
changes = st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=8)),
                          max_size=4)
Operation = tuple[str, dict[bytes, bytes | None], object]
operations: st.SearchStrategy[list[Operation]] = st.lists(st.one_of(
    st.tuples(st.just("commit"), changes, st.booleans()),
    st.tuples(st.just("losing_attempt"), changes, st.booleans()),
    st.tuples(st.just("abort"), changes, st.just(False)),
    st.tuples(st.just("restart"), st.just({}), st.just(False)),
    st.tuples(st.just("cleanup"), st.just({}), st.integers(1, 3)),
), min_size=1, max_size=14)


class Driver:
    def __init__(self, env: BackendEnv) -> None:
        self.env = env
        self.provider = env.provider(env.backend(tx_cache_max_entries=3))
        self.infos: list[StoreCommit] = []
        self.models: list[dict[bytes, bytes]] = []
        self.logged: list[int] = []  # batches the commit log still holds

    def attempt(self, change: dict[bytes, bytes | None], outcome: str,
                materialize: bool) -> None:
        info = self.infos[-1] if self.infos else None
        model = dict(self.models[-1]) if self.models else {}
        store = self.provider.get_store(info.version if info else 0, info)
        apply(store, model, change)
        if outcome == "abort":
            store.abort()
            return
        committed = store.commit(materialize=materialize)
        if outcome == "commit":
            batch_id = len(self.infos)
            self.env.commit_log().write(batch_id, entry_of(batch_id, committed))
            self.infos.append(committed)
            self.models.append(model)
            self.logged.append(batch_id)

    def restart(self) -> None:
        self.provider = self.env.provider(self.env.backend(tx_cache_max_entries=3))

    def cleanup(self, retain: int) -> None:
        report = cleanup_checkpoint(self.env.storage, retain, dry_run=False)
        assert report.problems == []
        retained = self.logged = self.logged[-retain:]
        if not retained:
            return
        self.check_loads(retained)
        floor = report.stores[0].floor
        newest = self.infos[retained[-1]]
        oldest = self.infos[retained[0]].version
        lowered = newest.pending_snapshot[0] if newest.pending_snapshot else oldest
        assert floor in (oldest, min(oldest, lowered))  # lowered only for an upload running
        self.check_nothing_unreferenced_below(retained, floor)
        assert self.env.commit_log().batch_ids() == retained

    def check_loads(self, batches: list[int]) -> None:
        reader = self.env.provider(self.env.backend())
        for batch in batches:
            info = self.infos[batch]
            for target in (info, info.unique_id):
                store = reader.get_store(info.version, target)
                assert state_of(store) == self.models[batch], (batch, target)
                store.abort()

    def check_nothing_unreferenced_below(self, batches: list[int], floor: int) -> None:
        infos = [self.infos[b] for b in batches]
        referenced = {path for info in infos for path in info.changelog.paths}
        referenced |= {info.materialized.manifest_path for info in infos if info.materialized}
        listing = list_store_dir(self.env.storage, STORE)
        kept = {obj.path for name, obj in listing.manifests
                if obj.path in referenced or name.version >= floor}
        for name, obj in [*listing.changelogs, *listing.manifests]:
            assert name.version >= floor or obj.path in referenced, obj.path
        named = set()
        for path in kept:
            manifest = self.env.storage.loop.run(aread_manifest(self.env.storage, path))
            named |= {f.dfs_path for f in manifest.files}
        for obj in listing.data_files:
            version = parse_uploaded_version(obj.path.rsplit("/", 1)[-1])
            assert version is not None and (version >= floor or obj.path in named), obj.path


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=operations)
def test_every_retained_checkpoint_loads_after_cleanup(
        history: list[Operation]) -> None:
    periodic = MaterializerSettings(interval=None, every_n_commits=3)
    with tempfile.TemporaryDirectory() as directory:
        env = file_env(Path(directory), materialization=periodic)
        try:
            driver = Driver(env)
            for kind, change, arg in history:
                if kind == "restart":
                    driver.restart()
                elif kind == "cleanup":
                    assert isinstance(arg, int)
                    driver.cleanup(arg)
                else:
                    driver.attempt(change, kind, bool(arg))
            driver.cleanup(2)
        finally:
            env.close()


# --- leftovers of uploads killed halfway ------------------------------------------------------

GRACE = 600.0
LEFTOVER = b"half an upload"


@pytest.fixture
def committed(tmp_path: Path) -> Iterator[BackendEnv]:
    """A file:// root with two committed batches of one store and their commit log."""
    env = file_env(tmp_path)
    driver = Driver(env)
    for value in (b"1", b"2"):
        driver.attempt({b"k": value}, "commit", False)
    yield env
    env.close()


def leave_temp_file(env: BackendEnv, directory: str, name: str, age: float) -> Path:
    """What a SIGKILL between an upload's temp write and its link leaves, `age` s ago."""
    assert env.file_root is not None
    temp = env.file_root / directory / name
    temp.write_bytes(LEFTOVER)
    written = time.time() - age
    os.utime(temp, (written, written))
    return temp


def cleanup(env: BackendEnv, dry_run: bool = False) -> CleanupReport:
    return cleanup_checkpoint(env.storage, 2, dry_run=dry_run, incomplete_grace=GRACE)


def test_cleanup_removes_temp_files_older_than_the_grace_and_reports_them(
        committed: BackendEnv) -> None:
    store_temp = leave_temp_file(committed, store_dir(STORE), ".tmp-store", 2 * GRACE)
    commit_temp = leave_temp_file(committed, "commits", ".tmp-commit", 2 * GRACE)
    report = cleanup(committed)
    assert report.incomplete_uploads == [
        ObjectInfo(f"{store_dir(STORE)}/.tmp-store", len(LEFTOVER)),
        ObjectInfo("commits/.tmp-commit", len(LEFTOVER))]
    assert (store_temp.exists(), commit_temp.exists()) == (False, False)
    assert report.incomplete_grace == GRACE


def test_cleanup_keeps_a_temp_file_younger_than_the_grace(committed: BackendEnv) -> None:
    live = leave_temp_file(committed, store_dir(STORE), ".tmp-live", GRACE / 2)
    assert cleanup(committed).incomplete_uploads == []
    assert live.read_bytes() == LEFTOVER


def test_dry_run_cleanup_reports_old_temp_files_and_keeps_them(committed: BackendEnv) -> None:
    old = leave_temp_file(committed, store_dir(STORE), ".tmp-old", 2 * GRACE)
    report = cleanup(committed, dry_run=True)
    assert [info.path for info in report.incomplete_uploads] == [f"{store_dir(STORE)}/.tmp-old"]
    assert old.exists()


def test_cleanup_of_temp_files_leaves_every_checkpoint_file(committed: BackendEnv) -> None:
    before = committed.paths()
    leave_temp_file(committed, store_dir(STORE), ".tmp-old", 2 * GRACE)
    assert cleanup(committed).files == []
    assert committed.paths() == before


@pytest.mark.parametrize(("attempt_timeout", "grace"), [
    (1.0, MIN_INCOMPLETE_GRACE), (10.0, MIN_INCOMPLETE_GRACE), (60.0, 600.0)])
def test_default_grace_is_ten_attempt_timeouts_and_never_under_five_minutes(
        attempt_timeout: float, grace: float) -> None:
    options = ChangelogSettings(attempt_timeout=attempt_timeout)
    assert default_incomplete_grace(options) == grace


def test_cleanup_without_a_grace_uses_the_default_of_the_storage_options(
        committed: BackendEnv) -> None:
    young = leave_temp_file(committed, store_dir(STORE), ".tmp-young", MIN_INCOMPLETE_GRACE / 2)
    report = cleanup_checkpoint(committed.storage, 2, dry_run=False)
    assert report.incomplete_grace == default_incomplete_grace(committed.changelog)
    assert young.exists()


@pytest.mark.parametrize("grace", [-1.0, float("nan")])
def test_cleanup_refuses_a_negative_or_undefined_grace(committed: BackendEnv,
                                                       grace: float) -> None:
    with pytest.raises(BackendError, match="incomplete_grace"):
        cleanup_checkpoint(committed.storage, 2, dry_run=True, incomplete_grace=grace)


class DiesHalfwayThroughDeletes:
    """The root's storage, but the first delete request removes only its first path and then
    the process "dies" (an error): what a cleanup killed in the middle leaves behind."""

    def __init__(self, storage: ChangelogService) -> None:
        self._storage = storage
        self.died = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def adelete_many(self, paths: Sequence[str]) -> None:
        if self.died:
            await self._storage.adelete_many(paths)
            return
        self.died = True
        await self._storage.adelete_many(list(paths)[:1])
        raise PermanentStorageError("killed halfway through the deletes")


def test_a_cleanup_killed_halfway_leaves_no_manifest_naming_a_deleted_file(
        tmp_path: Path) -> None:
    env = file_env(tmp_path)
    try:
        provider = env.provider(env.backend())
        info = None
        for batch in range(6):
            store = provider.get_store(info.version if info else 0, info)
            store.put(b"k%d" % batch, b"v" * 200)
            info = store.commit(materialize=batch % 2 == 0)
            env.commit_log().write(batch, entry_of(batch, info))
        dying = DiesHalfwayThroughDeletes(env.storage)
        with pytest.raises(PermanentStorageError, match="halfway"):
            cleanup_checkpoint(dying, 1, dry_run=False, lease=env.lease())  # type: ignore[arg-type]
        assert verify_checkpoint(env.storage) == []
        cleanup_checkpoint(env.storage, 1, dry_run=False)
        assert verify_checkpoint(env.storage) == []
        assert len(env.paths(f"{store_dir(STORE)}/", epochs=False)) < 20
    finally:
        env.close()
