"""The window a zombie's commit once slipped through, replayed step by step on file:// and S3.

A run passed its epoch check and was paused before its commit log write (or its write was in
flight). Another run took the root over and fenced the names the paused one would write, then
committed and cleaned up. The cleanup used to delete the fence of a batch that retention or a
newer generation made obsolete, which freed the name: the resumed write landed after the
takeover and its run reported the batch committed, although the heir had recovered the batch
before it. Fences are now never deleted, so the late write finds its name taken and its run
stops without reporting anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_errors import FencedError
from pyspark_dstl.backend.backend_settings import FencingSettings
from pyspark_dstl.backend.fencing.lease import CheckpointLease, acquire
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, Fence, decode_record
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.ops.cleanup import cleanup_checkpoint
from tests.support import FaultRule, S3Env
from tests.support.backend import BackendEnv, apply, entry_of, file_env, s3_env

LEASE = FencingSettings(lease_duration=1.0)
HELD_SECONDS = 5.0  # the zombie's request waits at the proxy this long: well below the
# 10 s attempt timeout, well above what the heir's takeover, commits and cleanup take


@pytest.fixture(params=["file", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendEnv]:
    if request.param == "file":
        made = file_env(tmp_path)
    else:
        made = s3_env(request.getfixturevalue("s3"), tmp_path)
    yield made
    made.close()


def commit_batches(env: BackendEnv, lease: CheckpointLease, batches: range) -> None:
    """Real stores committed batch by batch from the latest entry on, as a driver does."""
    provider = env.provider(env.backend())
    latest = CommitLog(env.storage).latest()
    info = latest[1].operators["agg"].stores[0] if latest else None
    log = CommitLog(env.storage, lease=lease)
    for batch in batches:
        store = provider.get_store(info.version if info else 0, info)
        apply(store, {}, {b"k%d" % batch: b"v%d" % batch})
        info = store.commit()
        log.write(batch, entry_of(batch, info))


def heir_takes_over_commits_and_cleans_up(env: BackendEnv, old: CheckpointLease,
                                          batches: range) -> CheckpointLease:
    """The takeover, then commits until retention (1 batch) drops every batch the fences
    stand in, then a cleanup."""
    heir = acquire(env.storage, LEASE, take_over=old.run_id)
    commit_batches(env, heir, batches)
    cleanup_checkpoint(env.storage, 1, dry_run=False, lease=heir)
    return heir


class PausedAfterCheck:
    """The zombie's lease: its epoch check passes, then the run is paused while `meanwhile`
    runs (the takeover and what the heir does), then its write goes on."""

    def __init__(self, lease: CheckpointLease, meanwhile: Callable[[], CheckpointLease]) -> None:
        self.epoch = lease.epoch
        self.run_id = lease.run_id
        self._lease = lease
        self._meanwhile = meanwhile
        self.heir: CheckpointLease | None = None

    def check(self, action: str) -> None:
        self._lease.check(action)
        if self.heir is None:
            self.heir = self._meanwhile()


def entries_by(env: BackendEnv, epoch: int) -> list[str]:
    found = []
    for path in env.paths("commits/"):
        record = decode_record(env.storage.get(path), path)
        if isinstance(record, CommitEntry) and record.writer and record.writer[0] == epoch:
            found.append(path)
    return found


def fences_in(env: BackendEnv) -> list[str]:
    return [path for path in env.paths("commits/")
            if isinstance(decode_record(env.storage.get(path), path), Fence)]


@pytest.mark.parametrize(("batch", "rerun", "name"), [(3, False, "commits/3.0"),
                                                      (2, True, "commits/2.1")])
def test_a_write_paused_across_a_takeover_and_the_heirs_cleanup_is_fenced(
        root: BackendEnv, batch: int, rerun: bool, name: str) -> None:
    old = root.lease()
    commit_batches(root, old, range(3))
    before = entries_by(root, old.epoch)
    paused = PausedAfterCheck(old, lambda: heir_takes_over_commits_and_cleans_up(
        root, old, range(3, 6)))
    with pytest.raises(FencedError, match=f"{name}.*taken by run"):
        CommitLog(root.storage, lease=paused).write(batch, CommitEntry(batch, {}), rerun=rerun)
    assert paused.heir is not None
    assert set(entries_by(root, old.epoch)) <= set(before), "the zombie added an entry"
    assert {"commits/3.0", "commits/2.1"} <= set(fences_in(root)), "a fence was deleted"
    latest = CommitLog(root.storage).latest()
    assert latest is not None and latest[0] == 5
    assert latest[1].writer == (paused.heir.epoch, paused.heir.run_id)
    paused.heir.release()


def test_a_commit_request_held_in_flight_across_a_takeover_finds_its_name_fenced(
        s3: S3Env, tmp_path: Path) -> None:
    env = s3_env(s3, tmp_path)
    # one request held: no hedge may overtake it (a hedge that lands first is a commit
    # before the takeover, a different story)
    env.changelog = env.changelog.with_changes(hedging_enabled=False)
    try:
        old = env.lease()
        commit_batches(env, old, range(3))
        s3.proxy.reset_log()
        s3.proxy.add_rule(FaultRule("delay", method="PUT", path_contains="commits/3.0",
                                    delay=HELD_SECONDS, times=1))
        outcome: dict[str, BaseException | str] = {}

        def zombie_write() -> None:
            try:
                outcome["path"] = CommitLog(env.storage, lease=old).write(3,
                                                                          CommitEntry(3, {}))
            except BaseException as exc:  # handed to the test thread
                outcome["error"] = exc

        writer = threading.Thread(target=zombie_write)
        writer.start()
        held = _wait_until(lambda: any(r.fault for r in s3.proxy.records("PUT", "commits/3.0")))
        assert held, "the zombie's commit request never reached the proxy"
        heir = heir_takes_over_commits_and_cleans_up(env, old, range(3, 6))
        still_held = [r for r in s3.proxy.records("PUT", "commits/3.0") if r.duration is None]
        assert still_held, "the heir took longer than the request was held: raise HELD_SECONDS"
        writer.join(HELD_SECONDS * 4)
        s3.proxy.clear_rules()
        assert isinstance(outcome.get("error"), FencedError), outcome
        assert entries_by(env, old.epoch) == [], "the zombie's entry landed after the takeover"
        assert "commits/3.0" in fences_in(env)
        heir.release()
    finally:
        s3.proxy.clear_rules()
        env.close()


def test_cleanup_keeps_fences_and_readers_count_only_batches_with_an_entry(
        tmp_path: Path) -> None:
    env = file_env(tmp_path)
    try:
        old = env.lease()
        commit_batches(env, old, range(3))
        heir = heir_takes_over_commits_and_cleans_up(env, old, range(3, 6))
        assert fences_in(env) == ["commits/2.1", "commits/3.0"]
        log = CommitLog(env.storage)
        assert log.batch_ids() == [5]
        assert [info.path for info in log.fences()] == ["commits/2.1", "commits/3.0"]
        assert log.obsolete(5) == []
        heir.release()
    finally:
        env.close()


def _wait_until(predicate: Callable[[], bool], seconds: float = 10.0) -> bool:
    done = threading.Event()
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return True
        done.wait(0.02)
    return predicate()
