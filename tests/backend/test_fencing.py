"""One writer per checkpoint root: epochs, leases, fences and the commit log's one name per write.

The cross-process cases (a second driver, a killed one, a paused zombie) are in
tests/reliability/test_fencing.py; here the runs are leases of this process.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import (
    CheckpointHeldError,
    CommitLogError,
    CorruptCheckpointError,
    FencedError,
)
from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.epochs import EpochTable
from pyspark_dstl.backend.fencing.lease import CheckpointLease, acquire, holder_of
from pyspark_dstl.backend.lineage.commit_entry import Fence, decode_record
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from pyspark_dstl.cli import main
from tests.support.backend import BackendEnv, apply, entry_of, env  # noqa: F401 - fixture
from tests.support.paths import REPO_ROOT

LEASE = FencingSettings(lease_duration=1.0)


class PausedAfterCheck:
    """The lease of a run paused right after its epoch check passed: while it is paused,
    `takeover()` runs (another run takes the root), then its write goes on."""

    def __init__(self, lease: CheckpointLease,
                 takeover: Callable[[], CheckpointLease]) -> None:
        self.epoch = lease.epoch
        self.run_id = lease.run_id
        self._lease = lease
        self._takeover = takeover
        self.newer: CheckpointLease | None = None

    def check(self, action: str) -> None:
        self._lease.check(action)
        self.newer = self._takeover()


def commit_batches(env: BackendEnv, lease: CheckpointLease,  # noqa: F811
                   batches: range) -> None:
    """Real stores committed batch by batch, as a driver does."""
    provider = env.provider(env.backend())
    latest = CommitLog(env.storage).latest()
    info = latest[1].operators["agg"].stores[0] if latest else None
    log = CommitLog(env.storage, lease=lease)
    for batch in batches:
        store = provider.get_store(info.version if info else 0, info)
        apply(store, {}, {b"k%d" % batch: b"v%d" % batch})
        info = store.commit()
        log.write(batch, entry_of(batch, info))


def test_a_run_takes_a_fresh_root_as_epoch_one_and_lets_go_with_an_end_file(
        env: BackendEnv) -> None:  # noqa: F811
    lease = acquire(env.storage, LEASE)
    assert (lease.epoch, lease.state) == (1, "held")
    holder = holder_of(env.storage)
    assert holder is not None and holder.record.run_id == lease.run_id and not holder.ended
    lease.release()
    assert env.paths("epochs/", epochs=True) == ["epochs/1", "epochs/1.end"]
    following = acquire(env.storage, LEASE)
    assert following.epoch == 2 and following.record.took_over is None
    assert env.paths("commits/") == [], "a run that let go is followed without fences"
    following.release()


def test_a_commit_log_write_needs_the_lease_of_the_run_holding_the_root(
        env: BackendEnv) -> None:  # noqa: F811
    with pytest.raises(CommitLogError, match="needs the lease of the run holding"):
        CommitLog(env.storage).write(0, CommitEntry(0, {}))
    assert env.paths("commits/") == []


def test_a_batch_below_the_latest_committed_one_is_refused(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    for batch in range(6):
        log.write(batch, CommitEntry(batch, {}))
    with pytest.raises(CommitLogError, match="batch 3 is at or below the latest committed "
                                             "batch 5"):
        log.write(3, CommitEntry(3, {}))
    assert "commits/3.1" not in env.paths("commits/")


def test_the_latest_batch_is_written_again_only_as_an_explicit_rerun(
        env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    log.write(0, CommitEntry(0, {}, extra={"n": "first"}))
    with pytest.raises(CommitLogError, match="re-executing it needs rerun=True"):
        log.write(0, CommitEntry(0, {}, extra={"n": "again"}))
    assert log.write(0, CommitEntry(0, {}, extra={"n": "again"}), rerun=True) == "commits/0.1"
    assert log.read(0).extra == {"n": "again"}
    with pytest.raises(CommitLogError, match="batch 1 cannot be re-executed"):
        log.write(1, CommitEntry(1, {}), rerun=True)


def test_every_entry_names_the_run_and_epoch_that_wrote_it(env: BackendEnv) -> None:  # noqa: F811
    log = env.commit_log()
    log.write(0, CommitEntry(0, {}))
    assert log.read(0).writer == (env.lease().epoch, env.lease().run_id)


def test_a_run_taken_over_is_fenced_before_it_writes_an_entry(
        env: BackendEnv) -> None:  # noqa: F811
    old = env.lease()
    env.commit_log().write(0, CommitEntry(0, {}))
    new = acquire(env.storage, LEASE, take_over=old.run_id)
    before = env.paths("commits/")
    with pytest.raises(FencedError, match=f"run {old.run_id} .*no longer holds it.*run "
                                          f"{new.run_id}"):
        CommitLog(env.storage, lease=old).write(1, CommitEntry(1, {}))
    assert env.paths("commits/") == before
    assert old.state == "fenced"
    new.release()


@pytest.mark.parametrize(("batch", "rerun", "name"), [(3, False, "commits/3.0"),
                                                      (2, True, "commits/2.1")])
def test_a_late_write_of_a_run_taken_over_finds_its_name_fenced(
        env: BackendEnv, batch: int, rerun: bool, name: str) -> None:  # noqa: F811
    old = env.lease()
    log = env.commit_log()
    for done in range(3):
        log.write(done, CommitEntry(done, {}))
    paused = PausedAfterCheck(old, lambda: acquire(env.storage, LEASE, take_over=old.run_id))
    with pytest.raises(FencedError, match=f"{name}.*taken by run"):
        CommitLog(env.storage, lease=paused).write(batch, CommitEntry(batch, {}), rerun=rerun)
    new = paused.newer
    assert new is not None and new.record.took_over == (old.epoch, old.run_id)
    fences = [path for path in env.paths("commits/")
              if isinstance(decode_record(env.storage.get(path), path), Fence)]
    assert fences == ["commits/2.1", "commits/3.0"]  # the rerun of 2, the next batch
    reader = CommitLog(env.storage)
    latest = reader.latest()
    assert latest is not None and latest[0] == 2 and latest[1].writer == (old.epoch,
                                                                           old.run_id)
    CommitLog(env.storage, lease=new).write(3, CommitEntry(3, {}))
    assert reader.batch_ids() == [0, 1, 2, 3]
    assert CommitLog(env.storage).read(3).writer == (new.epoch, new.run_id)
    new.release()


def test_fences_are_skipped_by_readers_and_never_obsolete(
        env: BackendEnv) -> None:  # noqa: F811
    old = env.lease()
    log = env.commit_log()
    for batch in range(3):
        log.write(batch, CommitEntry(batch, {}))
    new = acquire(env.storage, LEASE, take_over=old.run_id)
    reader = CommitLog(env.storage)
    assert reader.batch_ids() == [0, 1, 2]  # batch 3 holds only a fence
    assert [e.batch_id for e in reader.retained(2)] == [1, 2]
    assert reader.read(2).writer == (old.epoch, old.run_id)
    assert sorted(info.path for info in reader.obsolete(2)) == ["commits/0.0", "commits/1.0"]
    CommitLog(env.storage, lease=new).write(2, CommitEntry(2, {}), rerun=True)  # -> 2.2
    assert sorted(info.path for info in reader.obsolete(2)) == [
        "commits/0.0", "commits/1.0", "commits/2.0"]  # the fence 2.1 below 2.2 stays
    new.release()


def test_a_run_taken_over_deletes_nothing_in_cleanup(env: BackendEnv) -> None:  # noqa: F811
    old = env.lease()
    commit_batches(env, old, range(3))
    new = acquire(env.storage, LEASE, take_over=old.run_id)
    commit_batches(env, new, range(3, 5))
    before = env.paths()
    with pytest.raises(FencedError, match=f"run {old.run_id}"):
        cleanup_checkpoint(env.storage, 1, dry_run=False, lease=old)
    assert env.paths() == before
    report = cleanup_checkpoint(env.storage, 1, dry_run=False, lease=new)
    assert report.files and report.deleted_by == (new.epoch, new.run_id)
    new.release()


def test_an_idle_run_of_this_process_is_let_go_and_a_busy_one_refuses(
        env: BackendEnv) -> None:  # noqa: F811
    first = acquire(env.storage, LEASE)
    with first.use(), pytest.raises(CheckpointHeldError,
                                    match=f"held by run {first.run_id} .*of this process"):
        acquire(env.storage, LEASE)
    second = acquire(env.storage, LEASE)  # first is idle now: it lets go
    assert first.state == "released" and second.epoch == first.epoch + 1
    assert second.record.took_over is None
    with pytest.raises(FencedError, match="let go of it"):
        first.check("commit")
    second.release()


def test_a_process_exiting_with_its_lease_held_renews_no_more_and_logs_nothing(
        tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.support.lease_exit_job",
                           (tmp_path / "ckpt").as_uri()], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "holding the lease" in done.stdout
    assert done.stderr == ""


def test_a_damaged_epoch_file_is_reported_with_its_name(env: BackendEnv) -> None:  # noqa: F811
    lease = acquire(env.storage, LEASE)
    data = bytearray(env.storage.get("epochs/1"))
    pid = re.search(rb'"pid": (\d+)', data)
    assert pid is not None
    data[pid.end(1) - 1] ^= 0x01  # the last digit: still a number, so still JSON
    env.replace("epochs/1", bytes(data))
    with pytest.raises(CorruptCheckpointError, match="epoch file 'epochs/1' fails its checksum"):
        holder_of(env.storage)
    lease.release()


def test_epoch_names_that_are_not_ours_are_ignored(env: BackendEnv) -> None:  # noqa: F811
    lease = acquire(env.storage, LEASE)
    env.storage.put("epochs/notes.txt", b"hello")
    env.storage.put("epochs/01", b"not canonical")
    table = EpochTable.from_listing(env.storage.list("epochs/"))
    assert table.newest is not None and table.newest.epoch == 1
    lease.release()


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_takeover_fences_the_named_run_and_leaves_the_root_free(
        env: BackendEnv) -> None:  # noqa: F811
    dead = env.lease()
    env.commit_log().write(0, CommitEntry(0, {}))
    with pytest.raises(CheckpointHeldError, match=f"held by run {dead.run_id}.*not by run "
                                                  f"someone-else"):
        acquire(env.storage, LEASE, take_over="someone-else")
    status, text = run_cli("takeover", env.url, "--run", dead.run_id)
    assert status == 0 and f"run {dead.run_id} (epoch 1) is fenced" in text
    holder = holder_of(env.storage)
    assert holder is not None and holder.ended and holder.record.purpose == "takeover"
    with pytest.raises(FencedError):
        CommitLog(env.storage, lease=dead).write(1, CommitEntry(1, {}))
    following = acquire(env.storage, LEASE)
    assert following.record.took_over is None  # free: no waiting, no second fencing
    following.release()


def test_takeover_naming_another_run_is_refused_with_the_holder_named(
        env: BackendEnv, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    holder = env.lease()
    env.commit_log().write(0, CommitEntry(0, {}))
    assert run_cli("takeover", env.url, "--run", "0123456789abcdef")[0] == 2
    assert f"held by run {holder.run_id}" in capsys.readouterr().err
    assert holder.state == "held"


def test_inspect_names_the_run_holding_the_root(env: BackendEnv) -> None:  # noqa: F811
    lease = env.lease()
    env.commit_log().write(0, CommitEntry(0, {}))
    status, text = run_cli("inspect", env.url)
    assert status == 0 and f"holder: run {lease.run_id} (epoch 1, run, pid" in text
    report = json.loads(run_cli("inspect", env.url, "--json")[1])
    assert report["holder"]["run_id"] == lease.run_id and not report["holder"]["ended"]


@pytest.mark.parametrize("command", ["inspect", "verify", "cleanup"])
def test_the_tools_refuse_a_root_that_does_not_exist(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nonexistent" / "path"
    argv = [command, missing.as_uri()] + (["--apply"] if command == "cleanup" else [])
    status, text = run_cli(*argv)
    assert status == 2 and "0 problem(s)" not in text
    assert f"{str(missing)!r} does not exist" in capsys.readouterr().err
    assert not missing.exists()


@pytest.mark.parametrize("command", ["inspect", "verify", "cleanup"])
def test_the_tools_refuse_a_root_without_a_checkpoint(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "unrelated.txt").write_text("not a checkpoint")
    status, _ = run_cli(command, tmp_path.as_uri())
    assert status == 2
    assert "holds no checkpoint" in capsys.readouterr().err
