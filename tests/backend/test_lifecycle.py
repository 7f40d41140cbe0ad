"""FLIP-158 through the backend: materialize, adopt, truncate, clean up; and what stays."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.naming import snapshot_path, store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.materializer.manifest_listing import aread_manifest, list_manifests
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.support import FaultRule, S3Env
from tests.support.backend import (
    OPERATOR,
    BackendEnv,
    apply,
    entry_of,
    file_env,
    s3_env,
    state_of,
)

STORE = f"{OPERATOR}/0"
EVERY_THIRD = MaterializerSettings(interval=None, every_n_commits=3)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """For background uploads: a generous deadline, these tests are not about speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Query:
    """Batches of one partition, committed to the commit log like the driver does."""

    def __init__(self, env: BackendEnv) -> None:
        self.env = env
        self.provider = env.provider(env.backend())
        self.info: StoreCommit | None = None
        self.model: dict[bytes, bytes] = {}
        self.batch_id = -1

    def run_batch(self, changes: Mapping[bytes, bytes | None]) -> StoreCommit:
        store = self.provider.get_store(self.info.version if self.info else 0, self.info)
        apply(store, self.model, changes)
        self.info = store.commit()
        self.batch_id += 1
        self.env.commit_log().write(self.batch_id, entry_of(self.batch_id, self.info))
        return self.info

    def snapshot_files(self, version: int, unique_id: str) -> set[str]:
        path = snapshot_path(STORE, version, unique_id)
        manifest = self.env.storage.loop.run(aread_manifest(self.env.storage, path))
        return {f.dfs_path for f in manifest.files}


@pytest.fixture
def query(tmp_path: Path) -> Iterator[Query]:
    made = file_env(tmp_path, materialization=EVERY_THIRD)
    yield Query(made)
    made.close()


def wait_for_snapshot(query: Query, info: StoreCommit) -> None:
    """Let the background snapshot started by `info`'s commit finish (a generous bound)."""
    assert info.pending_snapshot == (info.version, info.unique_id)
    assert isinstance(query.provider, ChangelogProvider)
    assert query.provider.wait_for_snapshot(timeout=30.0)


def test_a_commit_adopts_the_finished_snapshot_and_keeps_only_later_changes(
        query: Query) -> None:
    for version in range(1, 4):
        info = query.run_batch({b"k%d" % version: b"v", b"shared": b"%d" % version})
    wait_for_snapshot(query, info)
    info4 = query.run_batch({b"k4": b"v"})
    assert info4.materialized is not None
    assert (info4.materialized.version, info4.materialized.unique_id) == (3, info.unique_id)
    assert info4.lineage == ((4, info4.unique_id),)
    assert info4.changelog.paths == (f"{store_dir(STORE)}/4_{info4.unique_id}.changelog",)
    # truncation is in memory only: the older changelog files are still there
    changelogs = [p for p in query.env.paths(store_dir(STORE)) if p.endswith(".changelog")]
    assert len(changelogs) == 4


def test_cleanup_after_adoption_removes_the_changelog_before_the_snapshot(query: Query) -> None:
    for version in range(1, 4):
        info3 = query.run_batch({b"k%d" % version: b"v"})
    wait_for_snapshot(query, info3)
    info4 = query.run_batch({b"k4": b"v"})
    report = cleanup_checkpoint(query.env.storage, retain=1, dry_run=False)
    assert report.problems == []
    expected = ({f"{store_dir(STORE)}/4_{info4.unique_id}.changelog",
                 snapshot_path(STORE, 3, info3.unique_id), "commits/3.0"}
                | query.snapshot_files(3, info3.unique_id))
    assert set(query.env.paths()) == expected
    for by_info in (True, False):
        provider = query.env.provider(query.env.backend())
        store = provider.get_store(4, info4 if by_info else info4.unique_id)
        assert state_of(store) == query.model


def test_a_later_snapshot_releases_the_earlier_one_but_not_the_files_it_shares(
        query: Query) -> None:
    for version in range(1, 4):
        info3 = query.run_batch({b"k%d" % version: b"v"})
    wait_for_snapshot(query, info3)
    for version in range(4, 7):
        info6 = query.run_batch({b"k%d" % version: b"v"})
    wait_for_snapshot(query, info6)
    info7 = query.run_batch({b"k7": b"v"})
    assert info7.materialized is not None and info7.materialized.version == 6
    first, second = query.snapshot_files(3, info3.unique_id), query.snapshot_files(
        6, info6.unique_id)
    assert first & second, "RocksDB keeps the first snapshot's SST: the second reuses it"
    report = cleanup_checkpoint(query.env.storage, retain=1, dry_run=False)
    assert report.problems == []
    remaining = set(query.env.paths())
    assert remaining == ({f"{store_dir(STORE)}/7_{info7.unique_id}.changelog",
                          snapshot_path(STORE, 6, info6.unique_id), "commits/6.0"} | second)
    store = query.env.provider(query.env.backend()).get_store(7, info7)
    assert state_of(store) == query.model


def test_a_dry_run_reports_the_same_files_and_deletes_nothing(query: Query) -> None:
    for version in range(1, 4):
        info3 = query.run_batch({b"k%d" % version: b"v"})
    wait_for_snapshot(query, info3)
    query.run_batch({b"k4": b"v"})
    before = query.env.paths()
    dry = cleanup_checkpoint(query.env.storage, retain=1, dry_run=True)
    assert query.env.paths() == before
    applied = cleanup_checkpoint(query.env.storage, retain=1, dry_run=False)
    assert sorted(dry.files) == sorted(applied.files) and dry.files
    assert dry.bytes == applied.bytes > 0


def test_files_of_attempts_no_checkpoint_names_go_once_below_the_retained_range(
        query: Query) -> None:
    query.run_batch({b"a": b"1"})
    base = query.info
    assert base is not None
    zombie = query.provider.get_store(1, base)  # an attempt the driver never commits
    zombie.put(b"zombie", b"1")
    zombie_info = zombie.commit()
    query.run_batch({b"b": b"2"})
    zombie_log = f"{store_dir(STORE)}/2_{zombie_info.unique_id}.changelog"
    crashed_sst = f"{store_dir(STORE)}/sst/2_000042-{'0' * 32}.sst"  # upload, no manifest
    query.env.storage.put(crashed_sst, b"left by a crashed snapshot upload")
    kept = cleanup_checkpoint(query.env.storage, retain=2, dry_run=False)
    assert kept.stores[0].floor == 1
    assert {zombie_log, crashed_sst} <= set(query.env.paths())  # version 2: may be running
    for changes in ({b"c": b"3"}, {b"d": b"4"}):
        query.run_batch(changes)
    report = cleanup_checkpoint(query.env.storage, retain=1, dry_run=False)
    assert {zombie_log, crashed_sst} <= set(report.files)
    assert not {zombie_log, crashed_sst} & set(query.env.paths())


def test_the_backstop_snapshots_at_once_and_leaves_no_changelog_to_replay(
        tmp_path: Path) -> None:
    backstop = MaterializerSettings(interval=None, every_n_commits=None, backstop_bytes=1)
    made = file_env(tmp_path, materialization=backstop)
    try:
        query = Query(made)
        info = query.run_batch({b"k": b"v" * 100})
        assert info.materialized is not None and info.materialized.version == info.version
        assert info.lineage == () and info.changelog.is_empty()
        restored = made.provider(made.backend()).get_store(1, info)
        assert restored.metrics()["replayed_change_sets"] == 0
        assert state_of(restored) == query.model
    finally:
        made.close()


def test_cleanup_keeps_the_files_of_a_snapshot_still_uploading(s3: S3Env,
                                                               tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path, materialization=MaterializerSettings(interval=None,
                                                                     every_n_commits=2))
    try:
        query = Query(made)
        query.run_batch({b"a": b"1"})
        # the manifest is written last; hold it so the snapshot's SSTs are up, unnamed
        s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains=".snapshot",
                                    delay=3.0, times=1))
        info2 = query.run_batch({b"b": b"2"})
        wait_until(lambda: any(r.method == "PUT" and ".snapshot" in r.path
                               for r in s3.proxy.log), "the manifest upload to start")
        info3 = query.run_batch({b"c": b"3"})
        assert info3.pending_snapshot == (2, info2.unique_id)
        report = cleanup_checkpoint(made.storage, retain=1, dry_run=False)
        assert report.stores[0].floor == 2  # not 3: version 2's snapshot is still uploading
        wait_until(lambda: bool(list_manifests(made.storage, store_dir(STORE))),
                   "the delayed manifest")
        store = made.provider(made.backend()).get_store(2, info2.unique_id)
        assert store.metrics()["replayed_change_sets"] == 0  # restored from that snapshot
        assert state_of(store) == {b"a": b"1", b"b": b"2"}
    finally:
        made.close()
