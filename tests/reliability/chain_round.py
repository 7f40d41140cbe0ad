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
        if point.startswith("changelog_persist"):
            assert killed.returncode != 0, "the killed task should fail the query"
        else:
            assert killed.returncode == -9, killed.stdout + killed.stderr[-3000:]
        rerun = self._run(place, None)
        assert rerun.returncode == 0 and "DONE" in rerun.stdout, rerun.stderr[-3000:]
        actual = outputs_of(place / "out")
        assert actual == expected, f"after a kill at {point}:{count}: {actual} != {expected}"
        from tests.reliability.soak import verify_root  # the soak imports this module

        problems = verify_root((place / "checkpoint").as_uri())
        assert problems == [], problems
        self.rounds += 1
        self.kills[point] = self.kills.get(point, 0) + 1
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
