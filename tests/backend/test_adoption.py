"""Snapshots when stores move between processes: scheduling counted from the lineage, adoption
of a snapshot another process started, and the check before every adoption that the files its
manifest names still exist (a cleanup may have run while it was uploading)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.naming import snapshot_path, store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.materializer.names import parse_uploaded_version
from tests.support import FaultRule, S3Env
from tests.support.backend import OPERATOR, BackendEnv, apply, entry_of, file_env, s3_env, state_of

STORE = f"{OPERATOR}/0"
EVERY_SECOND = MaterializerSettings(interval=None, every_n_commits=2)
# The proxy holds a snapshot's manifest upload until the test releases it: the test runs a
# cleanup in that window and asserts that the manifest had not landed yet. HOLD only bounds
# the window if a test fails before its release.
HOLD = 120.0
Model = dict[bytes, bytes]


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """For background uploads: a generous deadline, these tests are not about speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Host:
    """One process's backend (its own local directory) and the store's provider in it."""

    def __init__(self, env: BackendEnv, **changes: object) -> None:
        self.backend: StateBackend = env.backend(**changes)
        provider = env.provider(self.backend)
        assert isinstance(provider, ChangelogProvider)
        self.provider = provider

    def commit(self, base: StoreCommit | None, model: Model,
               changes: Mapping[bytes, bytes | None]) -> StoreCommit:
        store = self.provider.get_store(base.version if base else 0, base)
        apply(store, model, changes)
        return store.commit()

    def wait_for_snapshot(self) -> None:
        assert self.provider.wait_for_snapshot(timeout=30.0)

    def metrics(self, info: StoreCommit) -> Mapping[str, object]:
        """The store's counters after the commit of `info` (loaded again: no I/O)."""
        store = self.provider.get_store(info.version, info)
        assert store.metrics()["load_kind"] == "reuse"
        metrics = store.metrics()
        store.abort()
        return metrics


def manifest_landed(env: BackendEnv, snapshot: tuple[int, str]) -> bool:
    return snapshot_path(STORE, *snapshot) in env.paths(store_dir(STORE))


def hold_next_manifest(s3: S3Env) -> int:
    """Hold the next manifest upload until the test releases it; returns how many had started
    before."""
    s3.proxy.add_rule(FaultRule("hold", method="PUT", path_contains=".snapshot", delay=HOLD,
                                times=1))
    return s3.proxy.count("PUT", ".snapshot")


def wait_for_manifest_upload(s3: S3Env, started_before: int) -> None:
    """The manifest goes last: once its upload started, all the snapshot's files are up."""
    wait_until(lambda: s3.proxy.count("PUT", ".snapshot") > started_before,
               "the manifest upload to start")


def restorable(env: BackendEnv, info: StoreCommit, model: Model) -> None:
    """Another host loads `info`, and (version, unique id) alone, to exactly `model`."""
    for target in (info, info.unique_id):
        store = env.provider(env.backend()).get_store(info.version, target)
        assert state_of(store) == model
        store.abort()


# --- scheduling from the lineage -------------------------------------------------------------


def test_every_n_commits_counts_the_lineage_when_the_store_moves_between_processes(
        tmp_path: Path) -> None:
    made = file_env(tmp_path, materialization=MaterializerSettings(interval=None,
                                                                  every_n_commits=3))
    try:
        model: Model = {}
        a, b = Host(made), Host(made)
        info1 = a.commit(None, model, {b"k1": b"1"})
        info2 = b.commit(info1, model, {b"k2": b"2"})
        info3 = a.commit(info2, model, {b"k3": b"3"})  # this process's 2nd, the lineage's 3rd
        assert (info1.pending_snapshot, info2.pending_snapshot) == (None, None)
        assert info3.pending_snapshot == (3, info3.unique_id)
    finally:
        made.close()


def test_a_snapshot_still_uploading_elsewhere_counts_as_taken(tmp_path: Path) -> None:
    made = file_env(tmp_path)
    try:
        model: Model = {}
        a, b = Host(made), Host(made, materialization=EVERY_SECOND)
        info2 = a.commit(a.commit(None, model, {b"k1": b"1"}), model, {b"k2": b"2"})
        # as reported by a process whose snapshot of version 2 has not landed (it never will)
        info = dataclasses.replace(info2, pending_snapshot=(2, info2.unique_id))
        info3 = b.commit(info, model, {b"k3": b"3"})  # 1 commit since: no second snapshot
        assert info3.pending_snapshot == (2, info2.unique_id)
        info4 = b.commit(info3, model, {b"k4": b"4"})  # 2 since: this process takes one
        assert info4.pending_snapshot == (4, info4.unique_id)
    finally:
        made.close()


# --- adopting a snapshot another process started ----------------------------------------------


def test_a_snapshot_another_process_started_is_adopted_once_its_manifest_exists(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path, materialization=EVERY_SECOND)
    try:
        model: Model = {}
        a, b = Host(made), Host(made)
        info1 = a.commit(None, model, {b"k1": b"1"})
        info2 = a.commit(info1, model, {b"k2": b"2"})
        a.wait_for_snapshot()
        store = b.provider.get_store(2, info2)  # the store moved before a's next commit
        apply(store, model, {b"k3": b"3"})
        heads = s3.proxy.count("HEAD")
        info3 = store.commit()
        assert s3.proxy.count("HEAD") - heads == 1
        assert info3.materialized is not None
        assert (info3.materialized.version, info3.materialized.unique_id) == (2,
                                                                               info2.unique_id)
        assert info3.lineage == ((3, info3.unique_id),)
        assert info3.changelog.from_sqn == info3.materialized.sqn
        assert info3.pending_snapshot is None
        restorable(made, info3, model)
    finally:
        made.close()


def test_a_snapshot_that_lands_commits_later_keeps_the_changes_committed_since(
        tmp_path: Path) -> None:
    made = file_env(tmp_path, materialization=EVERY_SECOND)
    try:
        model: Model = {}
        a, b, c = Host(made), Host(made), Host(made)
        info1 = a.commit(None, model, {b"k1": b"1"})
        info2 = a.commit(info1, model, {b"k2": b"2"})
        a.wait_for_snapshot()
        snapshot = (2, info2.unique_id)
        info3 = b.commit(dataclasses.replace(info2, pending_snapshot=None), model,
                         {b"k3": b"3", b"k1": None})
        # what a process reports while that snapshot is still uploading somewhere else
        reported = dataclasses.replace(info3, pending_snapshot=snapshot)
        info4 = c.commit(reported, model, {b"k4": b"4"})
        assert info4.materialized is not None
        assert (info4.materialized.version, info4.materialized.unique_id) == snapshot
        assert info4.lineage == ((3, info3.unique_id), (4, info4.unique_id))
        restorable(made, info4, model)
    finally:
        made.close()


def test_each_commit_looks_once_for_a_snapshot_still_uploading_elsewhere(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        model: Model = {}
        a, b = Host(made), Host(made)
        info2 = a.commit(a.commit(None, model, {b"k1": b"1"}), model, {b"k2": b"2"})
        # as reported by a process whose snapshot of version 2 is still uploading
        info = dataclasses.replace(info2, pending_snapshot=(2, info2.unique_id))
        manifest = snapshot_path(STORE, 2, info2.unique_id)
        for version in (3, 4):
            before = s3.proxy.count("HEAD", manifest)
            info = b.commit(info, model, {b"k%d" % version: b"v"})
            assert s3.proxy.count("HEAD", manifest) - before == 1
            assert info.pending_snapshot == (2, info2.unique_id)  # still reported
            assert info.materialized is None
    finally:
        made.close()


def test_a_commit_with_no_snapshot_pending_looks_for_none(s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        model: Model = {}
        a, b = Host(made), Host(made)
        info = a.commit(None, model, {b"k1": b"1"})
        for version in (2, 3):
            info = b.commit(info, model, {b"k%d" % version: b"v"})
        assert s3.proxy.count("HEAD") == 0
    finally:
        made.close()


def test_a_pending_snapshot_older_than_the_retention_window_is_given_up(
        s3: S3Env, tmp_path: Path) -> None:
    made = s3_env(s3, tmp_path)
    try:
        model: Model = {}
        a, b = Host(made), Host(made, min_batches_to_retain=2)
        info2 = a.commit(a.commit(None, model, {b"k1": b"1"}), model, {b"k2": b"2"})
        info = dataclasses.replace(info2, pending_snapshot=(2, info2.unique_id))
        info3 = b.commit(info, model, {b"k3": b"3"})  # version 2 may still be adopted
        assert info3.pending_snapshot == (2, info2.unique_id)
        heads = s3.proxy.count("HEAD")
        info4 = b.commit(info3, model, {b"k4": b"4"})  # one last look, then it is given up
        assert s3.proxy.count("HEAD") == heads + 1
        assert info4.pending_snapshot is None and info4.materialized is None
        assert b.metrics(info4)["snapshots_dropped"] == 1
        b.commit(info4, model, {b"k5": b"5"})
        assert s3.proxy.count("HEAD") == heads + 1  # no more asking
    finally:
        made.close()


# --- safe adoption: files a cleanup took while the snapshot uploaded --------------------------


@pytest.mark.parametrize("adopter", ["own", "discovered"])
def test_a_snapshot_whose_uploaded_files_a_cleanup_took_is_not_adopted(
        s3: S3Env, tmp_path: Path, adopter: str) -> None:
    """(a): the store moved, no retained checkpoint reported the snapshot as pending, so a
    cleanup took the files it had uploaded; then its manifest landed."""
    made = s3_env(s3, tmp_path, materialization=EVERY_SECOND)
    try:
        model: Model = {}
        a = Host(made)
        b = Host(made) if adopter == "discovered" else a
        info1 = a.commit(None, model, {b"k1": b"1"})
        started = hold_next_manifest(s3)
        info2 = a.commit(info1, model, {b"k2": b"2"})
        snapshot = (2, info2.unique_id)
        assert info2.pending_snapshot == snapshot
        wait_for_manifest_upload(s3, started)
        info3 = b.commit(info2, model, {b"k3": b"3"})
        assert info3.pending_snapshot == snapshot and info3.materialized is None
        for batch, info in enumerate((info1, info2, info3)):  # the reports of the old days
            made.commit_log().write(batch, entry_of(
                batch, dataclasses.replace(info, pending_snapshot=None)))
        report = cleanup_checkpoint(made.storage, retain=1, dry_run=False)
        assert not manifest_landed(made, snapshot), "the hold ended before the cleanup did"
        taken = [p for p in report.files if "/sst/2_" in p or "/meta/2_" in p]
        assert taken, "the cleanup should have taken the snapshot's uploaded files"
        s3.proxy.release_held()
        a.wait_for_snapshot()
        assert manifest_landed(made, snapshot)
        info4 = b.commit(info3, model, {b"k4": b"4"})
        assert info4.materialized is None  # not adopted: the changelog stays the source
        metrics = b.metrics(info4)
        assert metrics["snapshots_dropped_missing_files"] == 1
        restorable(made, info4, model)
    finally:
        made.close()


def test_a_snapshot_whose_reused_files_a_cleanup_took_is_not_adopted(
        s3: S3Env, tmp_path: Path) -> None:
    """(b): a snapshot reuses the files of an older one that nothing retained names (its
    manifest was refused, so it failed after its data files were up); their version is below
    the floor, which a pending snapshot only lowers to its own version, so the cleanup takes
    them while the newer snapshot uploads."""
    made = s3_env(s3, tmp_path, materialization=EVERY_SECOND)
    try:
        model: Model = {}
        a = Host(made, min_batches_to_retain=3)
        infos = [a.commit(None, model, {b"k1": b"1" * 100})]
        s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains=".snapshot",
                                    status=403, times=1))
        infos.append(a.commit(infos[-1], model, {b"k2": b"2" * 100}))  # snapshot 2 starts
        first = (2, infos[-1].unique_id)
        a.wait_for_snapshot()  # and fails: its manifest is refused
        started = hold_next_manifest(s3)
        infos.append(a.commit(infos[-1], model, {b"k3": b"3"}))  # 2 dropped; 3 starts
        second = (3, infos[-1].unique_id)
        assert infos[-1].materialized is None and infos[-1].pending_snapshot == second
        wait_for_manifest_upload(s3, started)
        for version in (4, 5):  # while snapshot 3 uploads
            infos.append(a.commit(infos[-1], model, {b"k%d" % version: b"v"}))
        for batch, info in enumerate(infos):
            made.commit_log().write(batch, entry_of(batch, info))
        report = cleanup_checkpoint(made.storage, retain=3, dry_run=False)
        assert report.stores[0].floor == 3
        assert not manifest_landed(made, second), "the hold ended before the cleanup did"
        s3.proxy.release_held()
        a.wait_for_snapshot()
        manifest = made.storage.loop.run(aread_manifest(made.storage,
                                                        snapshot_path(STORE, *second)))
        reused = {f.dfs_path for f in manifest.files
                  if parse_uploaded_version(f.dfs_path.rsplit("/", 1)[-1]) == first[0]}
        assert reused and reused <= set(report.files)  # reused from 2, taken by the cleanup
        info6 = a.commit(infos[-1], model, {b"k6": b"6"})
        assert info6.materialized is None
        assert a.metrics(info6)["snapshots_dropped_missing_files"] == 1
        restorable(made, info6, model)
    finally:
        made.close()


def test_a_snapshot_that_outlived_the_retention_window_is_still_adopted(
        s3: S3Env, tmp_path: Path) -> None:
    """With minBatchesToRetain=2 a background snapshot routinely finishes several commits
    after it started; the cleanups meanwhile keep what it needs, and a later commit adopts it
    (dropping it would leave the changelog to grow until the backstop)."""
    made = s3_env(s3, tmp_path, materialization=EVERY_SECOND)
    try:
        model: Model = {}
        a = Host(made, min_batches_to_retain=2)
        infos = [a.commit(None, model, {b"k1": b"1" * 100})]
        started = hold_next_manifest(s3)
        infos.append(a.commit(infos[-1], model, {b"k2": b"2" * 100}))  # snapshot 2 starts
        snapshot = (2, infos[-1].unique_id)
        wait_for_manifest_upload(s3, started)
        for version in range(3, 7):  # well past the window of two while snapshot 2 uploads
            infos.append(a.commit(infos[-1], model, {b"k%d" % version: b"v"}))
            made.commit_log().write(version - 1, entry_of(version - 1, infos[-1]))
            report = cleanup_checkpoint(made.storage, retain=2, dry_run=False)
            assert report.stores[0].floor == 2  # lowered to the snapshot in flight
            assert infos[-1].pending_snapshot == snapshot
        s3.proxy.release_held()
        a.wait_for_snapshot()
        infos.append(a.commit(infos[-1], model, {b"k7": b"7"}))
        made.commit_log().write(6, entry_of(6, infos[-1]))
        cleanup_checkpoint(made.storage, retain=2, dry_run=False)  # after landing, too
        adopted = infos[-1].materialized
        assert adopted is not None and (adopted.version, adopted.unique_id) == snapshot
        assert a.metrics(infos[-1])["snapshots_dropped"] == 0
        restorable(made, infos[-1], model)
    finally:
        made.close()
