"""`verify` on snapshot manifests: a missing file is damage when a commit needs the manifest,
and the trace of an abandoned upload when none does (a run that lost the root can land its
manifest after the new holder's cleanup took that upload's files)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.backend.ops.verify import verify_report
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from pyspark_dstl.materializer.names import parse_uploaded_version
from tests.support.backend import BackendEnv, entry_of, file_env


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    made = file_env(tmp_path)
    yield made
    made.close()


def commit(env: BackendEnv, base: StoreCommit | None, key: bytes, *, batch: int | None,
           materialize: bool = False) -> StoreCommit:
    """One store commit on `base`; a commit log entry only when `batch` is given."""
    store = env.provider(env.backend()).get_store(base.version if base else 0, base)
    store.put(key, b"v" * 300)
    info = store.commit(materialize=materialize)
    if batch is not None:
        env.commit_log().write(batch, entry_of(batch, info))
    return info


def own_files(env: BackendEnv, info: StoreCommit) -> list[str]:
    """The data files the snapshot of `info` uploaded itself (not shared with older ones)."""
    assert info.materialized is not None
    manifest = env.storage.loop.run(aread_manifest(env.storage, info.materialized.manifest_path))
    return [f.dfs_path for f in manifest.files
            if parse_uploaded_version(posixpath.basename(f.dfs_path)) == info.version]


def test_a_missing_file_of_a_snapshot_a_commit_adopted_is_a_problem(env: BackendEnv) -> None:
    adopted = commit(env, None, b"a", batch=0, materialize=True)
    gone = own_files(env, adopted)[0]
    env.delete(gone)
    report = verify_report(env.storage)
    assert report.problems == [f"snapshot {adopted.materialized.manifest_path}: file {gone} "  # type: ignore[union-attr]
                               f"is missing"]


def test_an_unadopted_snapshot_whose_files_are_gone_is_listed_apart_not_a_problem(
        env: BackendEnv) -> None:
    base = commit(env, None, b"a", batch=0)
    abandoned = commit(env, base, b"zombie", batch=None, materialize=True)
    gone = own_files(env, abandoned)
    for path in gone:
        env.delete(path)
    report = verify_report(env.storage)
    assert report.problems == []
    manifest = abandoned.materialized.manifest_path  # type: ignore[union-attr]
    assert [line for line in report.uncommitted if manifest in line] == [
        f"store {abandoned.store_id}: snapshot {manifest}: no commit adopted it and "
        f"{len(gone)} file(s) it names are gone (e.g. {gone[0]}): an upload abandoned by a "
        f"run that lost the location or died; the next cleanup removes it"]


def test_the_next_cleanup_past_its_version_removes_an_abandoned_snapshot(
        env: BackendEnv) -> None:
    base = commit(env, None, b"a", batch=0)
    abandoned = commit(env, base, b"zombie", batch=None, materialize=True)
    for path in own_files(env, abandoned):
        env.delete(path)
    heir = commit(env, base, b"heir", batch=1)
    commit(env, heir, b"next", batch=2)
    cleanup_checkpoint(env.storage, 1, dry_run=False, lease=env.lease())
    report = verify_report(env.storage)
    assert (report.problems, report.uncommitted) == ([], [])
    assert abandoned.materialized.manifest_path not in env.paths()  # type: ignore[union-attr]


def test_a_snapshot_the_newest_commit_reports_in_flight_must_have_all_its_files(
        env: BackendEnv) -> None:
    base = commit(env, None, b"a", batch=0)
    running = commit(env, base, b"b", batch=None, materialize=True)
    assert running.materialized is not None
    reporting = StoreCommit(running.store_id, running.version, running.unique_id,
                               running.base_unique_id, running.changelog, base.materialized,
                               [*base.lineage, (running.version, running.unique_id)],
                               pending_snapshot=(running.version, running.unique_id))
    env.commit_log().write(1, entry_of(1, reporting))
    gone = own_files(env, running)[0]
    env.delete(gone)
    problems = verify_report(env.storage).problems
    assert problems == [f"snapshot {running.materialized.manifest_path}: file {gone} is missing"]
