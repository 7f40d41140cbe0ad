"""When snapshots happen: every N commits, every interval, one at a time, backstop, failures."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer import (
    MaterializationFailedError,
    Materializer,
    MaterializerClosedError,
    MaterializerSettings,
    RemoteFiles,
    SnapshotDecision,
    SnapshotRequest,
    SnapshotRequestError,
    SnapshotUploadError,
    StoreNotRegisteredError,
)
from pyspark_dstl.materializer.upload.schedule import first_delay
from tests.support import FaultRule, S3Env

STORE = "op1/part0"
REMOTE_DIR = "state/1/0"


@pytest.fixture
def file_remote(tmp_path: Path) -> Iterator[ChangelogService]:
    with ChangelogService((tmp_path / "remote").as_uri(), ChangelogSettings()) as remote:
        yield remote


@pytest.fixture
def s3_remote(s3: S3Env) -> Iterator[ChangelogService]:
    with ChangelogService(s3.url, s3.options) as remote:
        yield remote


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    created: list[Materializer] = []

    def build(remote: RemoteFiles, remote_dir: str = REMOTE_DIR, **changes: Any) -> Materializer:
        materializer = Materializer(remote, MaterializerSettings(**changes),
                                    str(tmp_path / "local"))
        materializer.register(STORE, remote_dir)
        created.append(materializer)
        return materializer

    yield build
    for materializer in created:
        materializer.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Rdict]:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    opened = Rdict(str(tmp_path / "db"), options)
    for i in range(200):
        opened[b"key%05d" % i] = b"v" * 50
    yield opened
    opened.close()


def request(version: int) -> SnapshotRequest:
    return SnapshotRequest(STORE, version, f"u{version}", version * 10)


def test_every_n_commits_triggers_a_periodic_snapshot(file_remote: ChangelogService,
                                                      make: Any) -> None:
    materializer = make(file_remote, interval=None, every_n_commits=3)
    assert [materializer.should_snapshot(STORE, 0) for _ in range(3)] == [
        SnapshotDecision.NO, SnapshotDecision.NO, SnapshotDecision.PERIODIC]


def test_commit_count_restarts_after_a_snapshot(file_remote: ChangelogService, make: Any,
                                                db: Rdict) -> None:
    materializer = make(file_remote, interval=None, every_n_commits=2)
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.NO
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.PERIODIC
    materializer.snapshot(db, request(2)).result(timeout=30)
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.NO
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.PERIODIC


def test_interval_triggers_once_it_is_due(file_remote: ChangelogService, make: Any,
                                          db: Rdict) -> None:
    start = time.monotonic()
    materializer = make(file_remote, interval=30.0, every_n_commits=None)
    # the first due time lies within one interval of registration
    assert materializer.should_snapshot(STORE, 0, now=start + 31) is SnapshotDecision.PERIODIC
    materializer.snapshot(db, request(1)).result(timeout=30)
    after = time.monotonic()
    assert materializer.should_snapshot(STORE, 0, now=after + 29) is SnapshotDecision.NO
    assert materializer.should_snapshot(STORE, 0, now=after + 31) is SnapshotDecision.PERIODIC


def test_small_interval_triggers_in_real_time(file_remote: ChangelogService, make: Any) -> None:
    # about time by nature: wait past a 50 ms interval (generously) on the real clock
    materializer = make(file_remote, interval=0.05, every_n_commits=None)
    time.sleep(0.2)
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.PERIODIC


def test_first_interval_is_spread_by_store_id() -> None:
    delays = [first_delay(f"op/0/{partition}", 600.0) for partition in range(64)]
    assert all(0.0 <= d < 600.0 for d in delays)
    assert len(set(delays)) > 56
    assert max(delays) - min(delays) > 300.0
    assert first_delay("op/0/7", 600.0) == delays[7]  # stable across calls and processes


def test_no_second_snapshot_while_one_is_in_flight(s3: S3Env, s3_remote: ChangelogService,
                                                   make: Any, db: Rdict) -> None:
    materializer = make(s3_remote, interval=None, every_n_commits=1)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains=".snapshot", delay=1.0))
    future = materializer.snapshot(db, request(1))
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.NO
    future.result(timeout=30)
    assert materializer.should_snapshot(STORE, 0) is SnapshotDecision.PERIODIC


def test_backstop_when_unmaterialized_changelog_is_too_large(file_remote: ChangelogService,
                                                             make: Any) -> None:
    materializer = make(file_remote, interval=None, every_n_commits=None, backstop_bytes=1000)
    assert materializer.should_snapshot(STORE, 999) is SnapshotDecision.NO
    assert materializer.should_snapshot(STORE, 1000) is SnapshotDecision.BACKSTOP
    assert materializer.metrics_snapshot()["decisions_backstop"] == 1


def test_backstop_waits_for_the_snapshot_in_flight(s3: S3Env, s3_remote: ChangelogService,
                                                   make: Any, db: Rdict) -> None:
    materializer = make(s3_remote, interval=None, every_n_commits=None, backstop_bytes=1000)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains=".snapshot", delay=1.0))
    future = materializer.snapshot(db, request(1))
    assert materializer.should_snapshot(STORE, 5000) is SnapshotDecision.BACKSTOP
    assert future.done() and future.exception() is None


def blocked_remote_dir(tmp_path: Path) -> str:
    """A remote directory that cannot be created: its parent is a regular file."""
    (tmp_path / "remote").mkdir(exist_ok=True)
    (tmp_path / "remote" / "blocked").write_bytes(b"")
    return "blocked/op"


def failing_snapshot(materializer: Materializer, db: Rdict, version: int) -> None:
    with pytest.raises(SnapshotUploadError):
        materializer.snapshot(db, request(version)).result(timeout=30)


def test_failure_limit_surfaces_as_materialization_failed(file_remote: ChangelogService, make: Any,
                                                          db: Rdict, tmp_path: Path) -> None:
    materializer = make(file_remote, blocked_remote_dir(tmp_path), max_consecutive_failures=1)
    failing_snapshot(materializer, db, 1)
    materializer.should_snapshot(STORE, 0)  # one failure is tolerated
    failing_snapshot(materializer, db, 2)
    with pytest.raises(MaterializationFailedError, match=STORE) as caught:
        materializer.should_snapshot(STORE, 0)
    assert isinstance(caught.value.__cause__, SnapshotUploadError)
    assert caught.value.failures == 2
    with pytest.raises(MaterializationFailedError):
        materializer.poll(STORE)


def test_success_resets_the_failure_count(file_remote: ChangelogService, make: Any, db: Rdict,
                                          tmp_path: Path) -> None:
    materializer = make(file_remote, blocked_remote_dir(tmp_path), max_consecutive_failures=1)
    failing_snapshot(materializer, db, 1)
    os.unlink(tmp_path / "remote" / "blocked")
    materializer.snapshot(db, request(2)).result(timeout=30)
    shutil.rmtree(tmp_path / "remote" / "blocked")
    blocked_remote_dir(tmp_path)
    failing_snapshot(materializer, db, 3)
    assert materializer.should_snapshot(STORE, 0) in (SnapshotDecision.NO,
                                                      SnapshotDecision.PERIODIC)


def test_failed_snapshot_removes_its_checkpoint_directory(file_remote: ChangelogService, make: Any,
                                                          db: Rdict, tmp_path: Path) -> None:
    materializer = make(file_remote, blocked_remote_dir(tmp_path))
    failing_snapshot(materializer, db, 1)
    folders = list((tmp_path / "local" / "checkpoints").iterdir())
    assert len(folders) == 1 and list(folders[0].iterdir()) == []
    assert materializer.metrics_snapshot()["snapshots_failed"] == 1


def test_poll_reports_the_newest_completed_snapshot_once(file_remote: ChangelogService, make: Any,
                                                         db: Rdict) -> None:
    materializer = make(file_remote)
    assert materializer.poll(STORE) is None
    materializer.snapshot(db, request(1)).result(timeout=30)
    newest = materializer.snapshot(db, request(2)).result(timeout=30)
    assert materializer.poll(STORE) == newest
    assert materializer.poll(STORE) is None


def test_unregistered_store_is_rejected(file_remote: ChangelogService, make: Any) -> None:
    materializer = make(file_remote)
    with pytest.raises(StoreNotRegisteredError, match="op9"):
        materializer.should_snapshot("op9", 0)
    materializer.unregister(STORE)
    with pytest.raises(StoreNotRegisteredError):
        materializer.poll(STORE)


def test_registering_a_store_under_another_directory_is_rejected(file_remote: ChangelogService,
                                                                 make: Any) -> None:
    materializer = make(file_remote)
    materializer.register(STORE, REMOTE_DIR)  # same again: fine
    with pytest.raises(SnapshotRequestError, match="state/9/9"):
        materializer.register(STORE, "state/9/9")


def test_close_waits_for_snapshots_in_flight(s3: S3Env, s3_remote: ChangelogService, make: Any,
                                             db: Rdict) -> None:
    materializer = make(s3_remote)
    s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains=".snapshot", delay=0.5))
    future = materializer.snapshot(db, request(1))
    materializer.close()
    assert future.done() and future.result().version == 1
    with pytest.raises(MaterializerClosedError):
        materializer.snapshot(db, request(2))


def test_commits_since_snapshot_from_the_owner_replaces_the_process_count(
        file_remote: ChangelogService, make: Any) -> None:
    materializer = make(file_remote, interval=None, every_n_commits=3)
    # a store that just moved here: this process saw no commit, the lineage holds three
    decision = materializer.should_snapshot(STORE, 0, commits_since_snapshot=3)
    assert decision is SnapshotDecision.PERIODIC


def test_a_short_lineage_does_not_snapshot_however_often_this_process_commits(
        file_remote: ChangelogService, make: Any) -> None:
    materializer = make(file_remote, interval=None, every_n_commits=3)
    decisions = [materializer.should_snapshot(STORE, 0, commits_since_snapshot=1)
                 for _ in range(5)]
    assert decisions == [SnapshotDecision.NO] * 5
