"""Crash-anywhere cycles: start the workload, SIGKILL it, start it again, check what it recovers.

Three ways to die, and two ways to be a second writer:
- random: at a random moment, during recovery or after a random number of committed batches;
- kill point: the library's own `backend.faults.kill_point` (DSTL_KILL_POINT=name:n) fires;
- on the wire (S3 only): the fault proxy holds a PUT or DELETE of a chosen kind, either before
  forwarding it (not applied) or after moto applied it (the answer never arrives), and the
  child is killed while it waits. These are the moments inside uploads and manifest writes
  that library code outside `backend` cannot mark without importing it;
- a second writer: another run starts on the root while one holds it, and is refused;
- a zombie: the running child is paused (SIGSTOP) until another run took the root over, then
  resumed; it must stop at its next commit or cleanup without writing anything.

After every death the next run's recovery compares every partition with the model at the last
committed batch (the child does that and exits 3 on a difference) and the harness checks that
no batch the child reported as committed was lost.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark_dstl.changelog.changelog_errors import ObjectNotFoundError
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from tests.reliability.child import ChildRun, Event
from tests.reliability.workload import EXIT_FENCED, EXIT_MISMATCH, EXIT_REFUSED
from tests.support import FaultRule, S3Env

CHILD_TIMEOUT = 120.0  # generous: a stuck child is a failure, not a slow one
LEASE = "3s"  # the children's lease: renewed every second, a zombie taken over after ~3 s
WIRE_TARGETS = (  # (name, method, substring of the request target)
    ("changelog_put", "PUT", ".changelog"),
    ("sst_put", "PUT", "/sst/"),
    ("manifest_put", "PUT", ".snapshot"),
    ("commit_log_put", "PUT", "/commits/"),
    ("cleanup_delete", "POST", "delete"),
)
POINT_COUNTS = {"changelog_persist_before": 6, "changelog_persist_after": 6,
                "commit_log_before": 4, "commit_log_after": 4, "cleanup_delete": 3}
# the rescale's own points are reached by the soak's rescale rounds (rescale_round.py)


class CrashFailure(AssertionError):
    """A run showed lost or wrong state, or ended in a way no crash explains."""


@dataclass
class CrashStats:
    runs: int = 0
    random_kills: int = 0
    point_kills: Counter[str] = field(default_factory=Counter)
    wire_kills: Counter[str] = field(default_factory=Counter)
    points_not_reached: int = 0
    wire_not_reached: int = 0
    kills_before_recovery: int = 0
    recoveries_verified: int = 0
    loads_by_id: int = 0
    loads_by_info: int = 0
    batches_committed: int = 0
    highest_committed: int = -1
    second_writers_refused: int = 0
    zombies_fenced: int = 0

    @property
    def kills(self) -> int:
        return self.random_kills + sum(self.point_kills.values()) + sum(self.wire_kills.values())

    def as_dict(self) -> dict[str, Any]:
        return {"kills": self.kills, "random_kills": self.random_kills,
                "point_kills": dict(self.point_kills), "wire_kills": dict(self.wire_kills),
                "points_not_reached": self.points_not_reached,
                "wire_not_reached": self.wire_not_reached,
                "kills_before_recovery": self.kills_before_recovery,
                "recoveries_verified": self.recoveries_verified,
                "loads_by_id": self.loads_by_id, "loads_by_info": self.loads_by_info,
                "batches_committed": self.batches_committed,
                "highest_committed": self.highest_committed, "runs": self.runs,
                "second_writers_refused": self.second_writers_refused,
                "zombies_fenced": self.zombies_fenced}


def workload_conf(local_dir: Path, s3: S3Env | None = None) -> dict[str, str]:
    """Settings of the child: snapshots every 3 commits, no batching wait."""
    conf = {
        "spark.dstl.stateStore.localDir": str(local_dir),
        "spark.dstl.stateStore.lockTimeout": "20s",
        "spark.dstl.materialization.interval": "off",
        "spark.dstl.materialization.everyNCommits": "3",
        "spark.dstl.changelog.persistDelay": "0ms",
        "spark.dstl.fencing.leaseDuration": LEASE,
    }
    if s3 is not None:
        options = s3.options.storage
        conf.update({
            "spark.dstl.changelog.s3.endpoint": str(options.s3_endpoint_url),
            "spark.dstl.changelog.s3.region": str(options.s3_region),
            "spark.dstl.changelog.s3.accessKeyId": str(options.s3_access_key_id),
            "spark.dstl.changelog.s3.secretAccessKey": str(options.s3_secret_access_key),
            "spark.dstl.changelog.s3.addressingStyle": "path",
        })
    return conf


class CrashHarness:
    def __init__(self, url: str, workdir: Path, seed: int, rng: random.Random,
                 s3: S3Env | None = None, partitions: int = 2) -> None:
        self.url = url
        self.workdir = workdir
        self.seed = seed
        self.rng = rng
        self.s3 = s3
        self.partitions = partitions
        self.stats = CrashStats()
        self._hosts = [workdir / f"host-{name}" for name in "abc"]
        self._recovery_seconds = 0.2  # updated from what recoveries take

    # --- one run ---------------------------------------------------------------------------------

    def start(self, *, last_batch: int = 10**9, verify_only: bool = False,
              env: dict[str, str] | None = None, host: Path | None = None) -> ChildRun:
        host = host or self.rng.choice(self._hosts)  # same host as before, or another one
        args = [self.url, "--seed", str(self.seed), "--partitions", str(self.partitions),
                "--last-batch", str(last_batch), "--run-seed", str(self.rng.getrandbits(32))]
        if verify_only:
            args.append("--verify-only")
        for key, value in workload_conf(host, self.s3).items():
            args += ["--conf", f"{key}={value}"]
        self.stats.runs += 1
        return ChildRun(args, self.workdir / f"run-{self.stats.runs}.stderr", env)

    def finish(self, run: ChildRun, killed: bool) -> int:
        """Wait for the end of `run` and check everything it said."""
        code = run.wait(CHILD_TIMEOUT)
        if run.timed_out:
            raise CrashFailure(f"run {self.stats.runs} hung for {CHILD_TIMEOUT:.0f} s (events: "
                               f"{run.events[-3:]})\n{run.stderr_tail()}")
        recovered = run.first("recovered")
        if run.first("mismatch") is not None or code == EXIT_MISMATCH:
            raise CrashFailure(f"run {self.stats.runs}: recovered state differs from the "
                               f"model: {run.first('mismatch')}\n{run.stderr_tail()}")
        if recovered is None:
            if not killed or code != -9:
                raise CrashFailure(f"run {self.stats.runs} ended ({code}) without recovering"
                                   f"\n{run.stderr_tail()}")
            self.stats.kills_before_recovery += 1
        else:
            self._check_recovered(run)
            self.stats.recoveries_verified += 1
            self._recovery_seconds = max(0.05, float(recovered.get("seconds", 0.2)))
            loaded = recovered.get("loaded_by", [])
            self.stats.loads_by_id += loaded.count("id")
            self.stats.loads_by_info += loaded.count("info")
        committed = run.committed()
        self.stats.batches_committed += len(committed)
        if committed:
            self.stats.highest_committed = max(self.stats.highest_committed, max(committed))
        failed = [e for e in run.events if e.get("event") in ("batch_failed", "gave_up")]
        if failed:
            raise CrashFailure(f"run {self.stats.runs}: a batch failed without any storage "
                               f"fault: {failed[0]}\n{run.stderr_tail()}")
        if killed and code != -9:
            raise CrashFailure(f"run {self.stats.runs} was to be killed but ended with {code}"
                               f"\n{run.stderr_tail()}")
        if not killed and code != 0:
            raise CrashFailure(f"run {self.stats.runs} failed with exit status {code}"
                               f"\n{run.stderr_tail()}")
        return code

    # --- ways to die -----------------------------------------------------------------------------

    def random_kill(self) -> None:
        run = self.start()
        if self.rng.random() < 0.25:  # somewhere inside the recovery
            run.wait_for(lambda e: e.get("event") == "recovering", CHILD_TIMEOUT)
            time.sleep(self.rng.uniform(0.0, self._recovery_seconds))
        else:
            wanted = self.rng.randint(0, 3)
            run.wait_for(_committed_n(wanted), CHILD_TIMEOUT)
            time.sleep(self.rng.uniform(0.0, 0.2))
        if not run.kill():
            self.finish(run, killed=False)
            return
        self.finish(run, killed=True)
        self.stats.random_kills += 1

    def point_kill(self, point: str | None = None) -> None:
        name = point or self.rng.choice(list(POINT_COUNTS))  # the points its workload reaches
        count = self.rng.randint(1, POINT_COUNTS[name])
        run = self.start(last_batch=self.stats.highest_committed + 12,
                         env={"DSTL_KILL_POINT": f"{name}:{count}"})
        run.wait(CHILD_TIMEOUT)
        reached = f"killed at {name}" in run.stderr_path.read_text(errors="replace")
        self.finish(run, killed=reached)
        if reached:
            self.stats.point_kills[name] += 1
        else:
            self.stats.points_not_reached += 1

    def wire_kill(self, target: tuple[str, str, str] | None = None,
                  applied: bool | None = None) -> None:
        """Hold one request of a kind at the proxy and kill the child while it waits."""
        if self.s3 is None:
            raise ValueError("wire kills need the S3 server behind the fault proxy")
        name, method, needle = target or self.rng.choice(WIRE_TARGETS)
        if applied is None:
            applied = self.rng.random() < 0.5
        proxy = self.s3.proxy
        run = self.start()
        run.wait_for(_committed_n(self.rng.randint(0, 2)), CHILD_TIMEOUT)
        proxy.reset_log()
        rule = (FaultRule("slow_response", method=method, path_contains=needle, delay=60.0)
                if applied else
                FaultRule("timeout", method=method, path_contains=needle, delay=60.0))
        proxy.add_rule(rule)
        try:
            held = self._wait_held(run, method, needle)
            if held is not None and applied:
                self._wait_applied(held.path, method)
            killed = run.kill()
        finally:
            proxy.clear_rules()
        self.finish(run, killed=killed)
        if held is not None and killed:
            self.stats.wire_kills[f"{name}_{'applied' if applied else 'not_applied'}"] += 1
        elif killed:
            self.stats.random_kills += 1
            self.stats.wire_not_reached += 1

    def second_writer(self) -> None:
        """A run holds the root; another one started meanwhile is refused naming it, and
        the first goes on committing."""
        first_host, second_host = self.rng.sample(self._hosts, 2)
        first = self.start(host=first_host)
        holding = first.wait_for(_event("holding"), CHILD_TIMEOUT)
        first.wait_for(_committed_n(1), CHILD_TIMEOUT)
        second = self.start(host=second_host)
        code = second.wait(CHILD_TIMEOUT)
        refused = second.first("refused")
        if code != EXIT_REFUSED or refused is None or holding is None \
                or holding["run_id"] not in refused["error"] or self.url not in refused["error"]:
            first.kill()
            first.wait(CHILD_TIMEOUT)
            raise CrashFailure(f"run {self.stats.runs}: a second writer was not refused "
                               f"naming the root and run {holding}: exit {code}, "
                               f"{refused}\n{second.stderr_tail()}")
        if second.committed() or second.first("recovered") is not None:
            raise CrashFailure(f"run {self.stats.runs}: the refused run went on: "
                               f"{second.events[-3:]}")
        before = len(first.committed())
        if first.wait_for(_committed_n(before + 1), CHILD_TIMEOUT) is None and first.alive:
            raise CrashFailure("the holder stopped committing after the refusal")
        self.stats.second_writers_refused += 1
        self.finish(first, killed=first.kill())

    def zombie(self) -> None:
        """The running child is paused; another run takes the root over after its lease;
        the paused one, resumed, stops at its next commit or cleanup (exit 6) and nothing it
        writes afterwards joins the commit log."""
        zombie_host, heir_host = self.rng.sample(self._hosts, 2)
        zombie = self.start(host=zombie_host)
        holding = zombie.wait_for(_event("holding"), CHILD_TIMEOUT)
        zombie.wait_for(_committed_n(self.rng.randint(1, 2)), CHILD_TIMEOUT)
        self._check_recovered(zombie)
        time.sleep(self.rng.uniform(0.0, 0.1))
        if not zombie.pause():
            self.finish(zombie, killed=False)
            return
        heir = self.start(host=heir_host)
        try:
            took = heir.wait_for(_event("holding"), CHILD_TIMEOUT)
            heir.wait_for(_committed_n(1), CHILD_TIMEOUT)
            entries_at_takeover = self._commit_entries()
        finally:
            still_paused = zombie.stopped
            zombie.resume()
        code = zombie.wait(CHILD_TIMEOUT)
        if code != EXIT_FENCED or zombie.first("fenced") is None or took is None:
            heir.kill()
            heir.wait(CHILD_TIMEOUT)
            woke = "" if still_paused else " (it was running again before the harness resumed it)"
            raise CrashFailure(f"run {self.stats.runs}: the resumed zombie was not fenced{woke}: "
                               f"exit {code}, events {zombie.events[-3:]}; the heir: "
                               f"{heir.first('refused') or heir.events[-3:]}"
                               f"\n{zombie.stderr_tail()}")
        self._record_committed(zombie)
        assert holding is not None
        late = [path for path, writer in self._commit_entries().items()
                if writer == holding["epoch"] and path not in entries_at_takeover]
        if late:
            raise CrashFailure(f"the zombie (epoch {holding['epoch']}) added {late} after "
                               f"epoch {took['epoch']} took the root over")
        self.stats.zombies_fenced += 1
        self.finish(heir, killed=heir.kill())

    def _check_recovered(self, run: ChildRun) -> None:
        """The run recovered no batch older than the newest one reported committed."""
        recovered = run.first("recovered")
        if recovered is not None and recovered["batch"] < self.stats.highest_committed:
            raise CrashFailure(f"run {self.stats.runs} recovered batch {recovered['batch']}, "
                               f"but batch {self.stats.highest_committed} was committed before "
                               f"(events in {run.stderr_path.with_suffix('.events')})")

    def _record_committed(self, run: ChildRun) -> None:
        committed = run.committed()
        self.stats.batches_committed += len(committed)
        if committed:
            self.stats.highest_committed = max(self.stats.highest_committed, max(committed))

    def _commit_entries(self) -> dict[str, int | None]:
        """Every commit log entry's path -> epoch of its writer (fences left out)."""
        from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, decode_record
        from pyspark_dstl.changelog.changelog_service import ChangelogService

        options = self.s3.options if self.s3 is not None else ChangelogSettings()
        with ChangelogService(self.url, options) as storage:
            found: dict[str, int | None] = {}
            for info in storage.list("commits/"):
                try:
                    record = decode_record(storage.get(info.path), info.path)
                except ObjectNotFoundError:
                    continue  # the running heir's cleanup took it meanwhile
                if isinstance(record, CommitEntry):
                    found[info.path] = record.writer[0] if record.writer else None
            return found

    def verify_final(self) -> None:
        run = self.start(verify_only=True)
        self.finish(run, killed=False)

    # --- helpers ---------------------------------------------------------------------------------

    def _wait_held(self, run: ChildRun, method: str, needle: str) -> Any:
        assert self.s3 is not None
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and run.alive:
            held = [r for r in self.s3.proxy.records(method, needle) if r.fault]
            if held:
                return held[0]
            time.sleep(0.01)
        return None

    def _wait_applied(self, path: str, method: str) -> None:
        """Until moto holds the held PUT's object; a DeleteObjects gets a moment instead."""
        assert self.s3 is not None
        if method != "PUT":
            time.sleep(0.3)
            return
        key = path.split("/", 2)[2]  # "/<bucket>/<prefix>/<key>" -> "<prefix>/<key>"
        relative = key[len(self.s3.prefix) + 1:]
        deadline = time.monotonic() + 10.0
        while self.s3.direct_get(relative) is None:
            if time.monotonic() > deadline:
                raise CrashFailure(f"the held PUT of {relative!r} never reached the server")
            time.sleep(0.01)


def _event(name: str) -> Any:
    return lambda event: event.get("event") == name


def _committed_n(count: int) -> Any:
    """A predicate: the recovery (count 0) or the count-th committed batch of this run."""
    seen = {"n": 0}

    def predicate(event: Event) -> bool:
        if event.get("event") == "recovered":
            return count == 0
        if event.get("event") == "committed":
            seen["n"] += 1
            return seen["n"] >= count
        return False

    return predicate
