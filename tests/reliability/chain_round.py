"""Chained rounds of the crash tests and the soak: a query with three stateful operators (the
first step, a deduplication, a windowed aggregation; tests/support/chain_job.py) killed at a
point of a chained batch, run again, and compared with a run that was never killed.

Kill points of a chained batch, in the order a batch reaches them: each operator's stage
committing its stores ("stage_done", once per operator and batch: a count n picks the
operator n mod 3 of batch n div 3), the commit entry not yet written ("commit_log_before"),
written but Spark's own commit not yet ("commit_log_after"), and a task's changelog upload
("changelog_persist_after", in a worker process: the task fails, and with it the query).
Whatever the point, the run after it must give every batch's rows exactly as the run that
was never killed, and `verify` must find the checkpoint clean.

`CHAIN_KILL_SEQUENCE` kills one checkpoint at each point in turn (counts relative to the
batch a restarted run begins with: every kill of the first five lands in a batch the runs
before it left uncommitted), then runs it to the end: each restart recovers from the kill
before it, and the last run's outputs and `verify` judge every recovery. The crash test runs
the sequence (8 Spark processes where a fresh checkpoint per point takes 13); the soak runs
single rounds at random points.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.chain_compare import STEPS, write_step
from tests.support.paths import REPO_ROOT

CHAIN_KILLS: tuple[tuple[str, int], ...] = (
    ("stage_done", 4),  # batch 1: the first operator's stores committed
    ("stage_done", 5),  # batch 1: the deduplication's stores committed too
    ("stage_done", 6),  # batch 1: every operator committed, the sink not yet run
    ("commit_log_before", 3),  # batch 2: sink done, the commit entry not written
    ("commit_log_after", 4),  # batch 3: the entry written, Spark's commit not yet
    ("changelog_persist_after", 5),  # a task of some stage, after its upload
)
# each kill in the batch the previous kill left uncommitted (batch 1, then 1, 1, 2, 3, ...)
CHAIN_KILL_SEQUENCE: tuple[tuple[str, int], ...] = (
    ("stage_done", 4),  # batch 1: the first operator's stores committed
    ("stage_done", 2),  # batch 1 again: the deduplication's stores committed too
    ("stage_done", 3),  # batch 1 again: every operator committed, the sink not yet run
    ("commit_log_before", 2),  # batch 2: sink done, the commit entry not written
    ("commit_log_after", 2),  # batch 3: the entry written, Spark's commit not yet
    ("changelog_persist_after", 5),  # a task of some stage of a later batch, after its upload
)
JOB_TIMEOUT_S = 900


@dataclass
class ChainRounds:
    workdir: Path
    rng: random.Random
    rounds: int = 0
    kills: dict[str, int] = field(default_factory=dict)
    _reference: dict[str, list[str]] | None = None

    def reference(self) -> dict[str, list[str]]:
        """Every batch's rows of a run that is never killed (made once)."""
        if self._reference is None:
            place = self._fresh("reference")
            done = self._run(place, None)
            assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
            self._reference = outputs_of(place / "out")
        return self._reference

    def round(self, point: str | None = None, count: int | None = None) -> None:
        """Kill a run at `point` (count `count`; by default one of CHAIN_KILLS at random), run
        it again, and check the outputs and the checkpoint."""
        if point is None or count is None:
            point, count = CHAIN_KILLS[self.rng.randrange(len(CHAIN_KILLS))]
        expected = self.reference()
        place = self._fresh(f"round-{self.rounds}-{point}-{count}")
        killed = self._run(place, f"{point}:{count}")
        self._assert_killed(killed, point, count)
        self.kills[point] = self.kills.get(point, 0) + 1
        self._finish(place, expected, f"{point}:{count}")

    def in_sequence(self, kills: tuple[tuple[str, int], ...]) -> None:
        """Kill one checkpoint at each of `kills` in turn, each run restarting from the kill
        before it; then run it to the end and check the outputs and the checkpoint."""
        expected = self.reference()
        place = self._fresh(f"sequence-{self.rounds}")
        for point, count in kills:
            killed = self._run(place, f"{point}:{count}")
            self._assert_killed(killed, point, count)
            self.kills[point] = self.kills.get(point, 0) + 1
        self._finish(place, expected, " then ".join(f"{p}:{c}" for p, c in kills))

    def _assert_killed(self, killed: subprocess.CompletedProcess[str], point: str,
                       count: int) -> None:
        if point.startswith("changelog_persist"):
            assert killed.returncode != 0, f"the task killed at {point}:{count} should fail " \
                                           "the query"
        else:
            assert killed.returncode == -9, (f"not killed at {point}:{count}: "
                                             + killed.stdout + killed.stderr[-3000:])

    def _finish(self, place: Path, expected: dict[str, list[str]], after: str) -> None:
        rerun = self._run(place, None)
        assert rerun.returncode == 0 and "DONE" in rerun.stdout, rerun.stderr[-3000:]
        actual = outputs_of(place / "out")
        assert actual == expected, f"after a kill at {after}: {actual} != {expected}"
        from tests.reliability.soak import verify_root  # the soak imports this module

        problems = verify_root((place / "checkpoint").as_uri())
        assert problems == [], problems
        self.rounds += 1
        shutil.rmtree(place, ignore_errors=True)

    def _fresh(self, name: str) -> Path:
        place = self.workdir / "chain" / name
        shutil.rmtree(place, ignore_errors=True)
        for index, rows in enumerate(STEPS):
            write_step(place / "in", index, rows)
        return place

    def _run(self, place: Path, kill: str | None) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        environment.pop("DSTL_KILL_POINT", None)
        if kill is not None:
            environment["DSTL_KILL_POINT"] = kill
        arguments = [sys.executable, "-m", "tests.support.chain_job", str(place / "in"),
                     str(place / "checkpoint"), str(place / "out")]
        return subprocess.run(arguments, cwd=REPO_ROOT, env=environment, capture_output=True,
                              text=True, timeout=JOB_TIMEOUT_S, check=False)


def outputs_of(directory: Path) -> dict[str, list[str]]:
    """The rows the sink kept per batch (one file per batch id)."""
    if not directory.exists():
        return {}
    return {path.stem: json.loads(path.read_text())
            for path in sorted(directory.glob("batch-*.json"))}
