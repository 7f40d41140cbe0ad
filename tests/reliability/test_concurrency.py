"""Concurrent attempts of one partition (speculation, zombies): nothing overwritten, one lineage.

Each attempt is a process of its own (tests/reliability/attempt.py) holding its store open
until told to commit, so the interleavings are exact. Every attempt writes its name under
("aux", b"attempt"): state merged from two attempts, or taken from the wrong one, would show.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog, OperatorCommit
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from tests.reliability.attempt import ATTEMPT_KEY
from tests.reliability.child import ChildRun, Event
from tests.reliability.crash import workload_conf
from tests.reliability.model import WorkloadSpec, expected_state
from tests.reliability.soak import verify_root
from tests.reliability.workload import Workload, read_state

pytestmark = pytest.mark.slow
SEED = 41
SPEC = WorkloadSpec(seed=SEED, partitions=1)
TIMEOUT = 60.0


class Cluster:
    """A file:// checkpoint root, its driver (commit log) and attempts on named hosts."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.root = tmp_path / "ckpt"
        self.url = self.root.as_uri()
        self.attempts: list[ChildRun] = []
        self.winners: dict[int, str] = {}  # batch id -> attempt whose info was committed

    def attempt(self, name: str, batch: int, host: str, lock_timeout: float = 30.0) -> ChildRun:
        args = [self.url, "--name", name, "--batch", str(batch), "--seed", str(SEED),
                "--local-dir", str(self.tmp_path / host), "--lock-timeout", str(lock_timeout)]
        run = ChildRun(args, self.tmp_path / f"{name}.stderr",
                       module="tests.reliability.attempt")
        self.attempts.append(run)
        return run

    def workload(self, host: str) -> Workload:
        options = BackendSettings.from_mapping(workload_conf(self.tmp_path / host))
        return Workload(SPEC, self.url, options, rng=random.Random(0), retain=2)

    def run_batches(self, last_batch: int, host: str, cleanup: bool = False) -> None:
        """Batches committed by single attempts (the workload), as a driver would."""
        workload = self.workload(host)
        try:
            workload.recover(check=False)
            while workload.last_batch < last_batch:
                workload.run_batch(workload.last_batch + 1)
                if cleanup:
                    workload.cleanup()
        finally:
            workload.close()

    def commit_batch(self, batch: int, name: str, info: StoreCommit) -> None:
        entry = CommitEntry(batch, {SPEC.operator: OperatorCommit(1, {0: info})})
        driver = self.workload("driver")
        try:
            driver.backend.commit_log(self.url).write(batch, entry, lease=driver.take())
        finally:
            driver.close()
        self.winners[batch] = name

    def files(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.root)): p.read_bytes()
                for p in self.root.rglob("*") if p.is_file()}

    def expected(self, batch: int) -> dict[tuple[str, bytes], bytes]:
        state = expected_state(SPEC, batch, 0)
        winner = next((self.winners[b] for b in sorted(self.winners, reverse=True)
                       if b <= batch), None)
        if winner is not None:
            state[ATTEMPT_KEY] = winner.encode()
        return state

    def loaded_state(self, host: str) -> tuple[int, dict[tuple[str, bytes], bytes]]:
        workload = self.workload(host)
        try:
            batch = workload.recover(check=False)
            return batch, read_state(workload.open_store(0))
        finally:
            workload.close()

    def lineage_problems(self) -> list[str]:
        """Each retained entry must build on the one before: version + 1, base id = its id."""
        workload = self.workload("checker")
        try:
            log = CommitLog(workload.backend.context(self.url).storage)
            entries = [log.read(batch) for batch in log.batch_ids()]
        finally:
            workload.close()
        problems = []
        for before, after in pairwise(entries):
            a = before.operators[SPEC.operator].stores[0]
            b = after.operators[SPEC.operator].stores[0]
            if b.version != a.version + 1 or b.base_unique_id != a.unique_id:
                problems.append(f"batch {after.batch_id} ({b.version}, base {b.base_unique_id})"
                                f" does not follow ({a.version}, {a.unique_id})")
        return problems

    def close(self) -> None:
        for run in self.attempts:
            if run.alive:
                run.kill()
            run.wait(TIMEOUT)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def wait_event(run: ChildRun, name: str) -> Event:
    event = run.wait_for(lambda e: e.get("event") in (name, "error"), TIMEOUT)
    assert event is not None and event["event"] == name, (event, run.stderr_tail())
    return event


def committed_info(run: ChildRun) -> StoreCommit:
    return StoreCommit.from_dict(wait_event(run, "committed")["info"])


def unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """Files of `before` whose bytes changed (deleted ones are cleanup's business)."""
    return sorted(path for path, data in before.items() if path in after and after[path] != data)


def test_two_attempts_on_two_hosts_commit_side_by_side_and_the_driver_keeps_one(
        cluster: Cluster) -> None:
    cluster.run_batches(2, host="host-w")
    a = cluster.attempt("A", batch=3, host="host-a")
    b = cluster.attempt("B", batch=3, host="host-b")
    wait_event(a, "loaded")
    wait_event(b, "loaded")
    before = cluster.files()
    a.send("commit")
    b.send("commit")
    info_a, info_b = committed_info(a), committed_info(b)
    assert (info_a.version, info_a.base_unique_id) == (info_b.version, info_b.base_unique_id)
    assert info_a.unique_id != info_b.unique_id
    new_a = set(info_a.changelog.paths) - set(before)
    new_b = set(info_b.changelog.paths) - set(before)
    assert new_a and new_b and new_a.isdisjoint(new_b)
    cluster.commit_batch(3, "B", info_b)
    for run in (a, b):
        run.send("exit")
    cluster.run_batches(5, host="host-w")
    assert unchanged(before, cluster.files()) == []
    assert cluster.lineage_problems() == []
    assert cluster.loaded_state("host-r") == (5, cluster.expected(5))
    assert verify_root(cluster.url) == []


def test_a_second_attempt_on_the_same_host_waits_for_the_store_lock(cluster: Cluster) -> None:
    cluster.run_batches(1, host="host-w")
    first = cluster.attempt("A", batch=2, host="host-a")
    wait_event(first, "loaded")
    before = cluster.files()
    refused = cluster.attempt("B", batch=2, host="host-a", lock_timeout=0.5)
    error = wait_event(refused, "error")
    assert error["type"] == "StoreLockedError" and "locked by another process" in \
        error["message"]
    assert cluster.files() == before, "the refused attempt must write nothing"
    waiting = cluster.attempt("C", batch=2, host="host-a", lock_timeout=TIMEOUT)
    first.send("commit")
    info_a = committed_info(first)
    first.send("exit")
    wait_event(waiting, "loaded")  # only once A released the lock
    waiting.send("commit")
    info_c = committed_info(waiting)
    assert info_c.base_unique_id == info_a.base_unique_id != info_c.unique_id
    cluster.commit_batch(2, "C", info_c)
    waiting.send("exit")
    assert cluster.lineage_problems() == []
    assert cluster.loaded_state("host-r") == (2, cluster.expected(2))


def test_a_zombie_attempt_finishing_late_changes_nothing_committed(cluster: Cluster) -> None:
    cluster.run_batches(2, host="host-w")
    zombie = cluster.attempt("Z", batch=3, host="host-z")
    wait_event(zombie, "loaded")
    retry = cluster.attempt("R", batch=3, host="host-r")
    wait_event(retry, "loaded")
    retry.send("commit")
    cluster.commit_batch(3, "R", committed_info(retry))
    retry.send("exit")
    cluster.run_batches(6, host="host-w", cleanup=True)
    before = cluster.files()
    zombie.send("commit-snapshot")  # late, with a snapshot of its own on top
    late = committed_info(zombie)
    zombie.send("exit")
    assert late.version == 4 and late.materialized is not None
    assert unchanged(before, cluster.files()) == []
    assert cluster.lineage_problems() == []
    assert cluster.loaded_state("host-q") == (6, cluster.expected(6))
    cluster.run_batches(9, host="host-w", cleanup=True)
    assert not any(late.unique_id in path for path in cluster.files()), \
        "cleanup removes the zombie's files once they fall below the retained versions"
    assert cluster.loaded_state("host-q") == (9, cluster.expected(9))
    assert verify_root(cluster.url) == []
