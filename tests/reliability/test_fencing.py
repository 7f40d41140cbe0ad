"""Two writers on one root, across processes: refused at start, or fenced when a zombie wakes.

The workload cases are the soak's (crash.py: second_writer, zombie); the steered holder
(holder.py) shows the timing rules: a holder killed on this host is taken over at once, a
paused one only after its lease, or at once with `takeover --run`.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import CheckpointHeldError
from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.lease import acquire, holder_of
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.cli import main
from tests.reliability.child import ChildRun, Event
from tests.reliability.crash import CrashHarness
from tests.reliability.soak import verify_root
from tests.support import S3Env

pytestmark = pytest.mark.slow
TIMEOUT = 60.0
LEASE_SECONDS = 2.0


def holder_run(url: str, tmp_path: Path, name: str) -> ChildRun:
    return ChildRun([url, "--lease", f"{LEASE_SECONDS}s"], tmp_path / f"{name}.stderr",
                    module="tests.reliability.holder")


def wait_event(run: ChildRun, name: str) -> Event:
    event = run.wait_for(lambda e: e.get("event") in (name, "refused", "error"), TIMEOUT)
    assert event is not None and event["event"] == name, (event, run.stderr_tail())
    return event


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[ChangelogService]:
    with ChangelogService((tmp_path / "ckpt").as_uri(), ChangelogSettings()) as opened:
        yield opened


def test_a_second_workload_is_refused_while_the_first_holds_the_root(tmp_path: Path) -> None:
    harness = CrashHarness((tmp_path / "ckpt").as_uri(), tmp_path, 51, random.Random(51))
    harness.second_writer()
    harness.verify_final()
    assert harness.stats.second_writers_refused == 1
    assert verify_root(harness.url) == []


def test_a_paused_workload_is_fenced_when_it_resumes_and_loses_nothing(tmp_path: Path) -> None:
    harness = CrashHarness((tmp_path / "ckpt").as_uri(), tmp_path, 52, random.Random(52))
    harness.zombie()
    harness.verify_final()
    assert harness.stats.zombies_fenced == 1
    assert verify_root(harness.url) == []


def test_a_second_writer_and_a_zombie_on_the_s3_api(s3: S3Env, tmp_path: Path) -> None:
    harness = CrashHarness(s3.url, tmp_path, 53, random.Random(53), s3=s3)
    harness.second_writer()
    harness.zombie()
    harness.verify_final()
    assert (harness.stats.second_writers_refused, harness.stats.zombies_fenced) == (1, 1)
    assert verify_root(s3.url, s3) == []


def test_a_start_is_refused_while_another_process_renews_its_lease(
        tmp_path: Path, storage: ChangelogService) -> None:
    holder = holder_run(storage.url, tmp_path, "holder")
    try:
        run_id = wait_event(holder, "holding")["run_id"]
        started = time.monotonic()
        with pytest.raises(CheckpointHeldError,
                           match=f"checkpoint {storage.url} is held by run {run_id} .*renewed "
                                 f"its lease"):
            acquire(storage, FencingSettings(lease_duration=LEASE_SECONDS))
        assert time.monotonic() - started < LEASE_SECONDS + 1.0  # decided by a renewal
        holder.send("commit 0")
        wait_event(holder, "committed")
    finally:
        holder.send("exit")
        holder.wait(TIMEOUT)


def test_a_holder_killed_on_this_host_is_taken_over_at_once(
        tmp_path: Path, storage: ChangelogService) -> None:
    holder = holder_run(storage.url, tmp_path, "holder")
    dead = wait_event(holder, "holding")
    holder.send("commit 0")
    wait_event(holder, "committed")
    holder.kill()
    holder.wait(TIMEOUT)
    started = time.monotonic()
    lease = acquire(storage, FencingSettings(lease_duration=30.0))
    assert time.monotonic() - started < 10.0, "no lease to wait for: the process is gone"
    assert lease.record.took_over == (dead["epoch"], dead["run_id"])
    lease.release()


def test_a_paused_holder_is_taken_over_after_its_lease_and_fenced_when_resumed(
        tmp_path: Path, storage: ChangelogService) -> None:
    holder = holder_run(storage.url, tmp_path, "holder")
    paused = wait_event(holder, "holding")
    holder.send("commit 0")
    wait_event(holder, "committed")
    holder.pause()
    try:
        started = time.monotonic()
        lease = acquire(storage, FencingSettings(lease_duration=LEASE_SECONDS))
        assert time.monotonic() - started >= LEASE_SECONDS  # its renewals stopped for a lease
        assert lease.record.took_over == (paused["epoch"], paused["run_id"])
        CommitLog(storage, lease=lease).write(1, CommitEntry(1, {}))
        before = sorted(info.path for info in storage.list(""))
    finally:
        holder.resume()
    holder.send("commit 2")
    assert "no longer holds it" in wait_event(holder, "fenced")["error"]
    holder.send("cleanup")
    wait_event(holder, "fenced")
    holder.send("exit")
    holder.wait(TIMEOUT)
    after = sorted(info.path for info in storage.list("") if not info.path.startswith("epochs/"))
    assert after == [path for path in before if not path.startswith("epochs/")]
    latest = CommitLog(storage).latest()
    assert latest is not None and latest[1].writer == (lease.epoch, lease.run_id)
    lease.release()


def test_takeover_of_a_paused_holder_needs_no_wait_and_fences_it(
        tmp_path: Path, storage: ChangelogService) -> None:
    holder = holder_run(storage.url, tmp_path, "holder")
    paused = wait_event(holder, "holding")
    holder.send("commit 0")
    wait_event(holder, "committed")
    holder.pause()
    try:
        out = io.StringIO()
        assert main(["takeover", storage.url, "--run", paused["run_id"]], out=out) == 0
        current = holder_of(storage)
        assert current is not None and current.ended
        assert current.record.took_over == (paused["epoch"], paused["run_id"])
    finally:
        holder.resume()
    holder.send("commit 1")
    wait_event(holder, "fenced")
    holder.send("exit")
    holder.wait(TIMEOUT)
    assert CommitLog(storage).batch_ids() == [0]
