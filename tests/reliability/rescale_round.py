"""The soak's rescale rounds: `python -m pyspark_dstl rescale` killed at one of its points.

A root of its own holds a checkpoint as the Spark integration wrote it before key groups (the hash
layout, tests/support/rescale.py), so the first round is the one-time migration to key groups
(key by key) and the later ones move ranges. Each round picks a new partition count and a kill
point the rescale reaches (one of its new stores committed, all of them, just before or just
after the commit log entry), runs the command as a child with DSTL_KILL_POINT, and checks what
the kill left: the old layout or the new one, whole, holding exactly the model's rows, every
key in the partition owning its key group (in the hash layout: where Spark's hash puts it).
Then the command runs again without a kill and must finish the rescale.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from tests.reliability.crash import CrashFailure, CrashStats
from tests.support.backend import BackendEnv
from tests.support.rescale import (
    Content,
    build_checkpoint,
    check_layout,
    layout_is_grouped,
    users,
)

MIGRATION_POINTS = ("rescale_store_committed", "rescale_stores_done")  # key by key
RANGE_POINTS = ("rescale_ranges_clipped", "rescale_ranges_copied", "rescale_ranges_committed",
                "rescale_ranges_done")
COMMIT_POINTS = ("commit_log_before", "commit_log_after")
POINTS = MIGRATION_POINTS + RANGE_POINTS + COMMIT_POINTS
MAX_PARTITIONS = 7
TIMEOUT = 120.0


class RescaleRounds:
    def __init__(self, env: BackendEnv, tool_args: list[str], workdir: Path,
                 rng: random.Random, stats: CrashStats) -> None:
        """`tool_args`: what the command needs besides the root (S3 endpoint, credentials)."""
        self.env = env
        self.tool_args = tool_args
        self.workdir = workdir
        self.rng = rng
        self.stats = stats
        self.rounds = 0
        self._content: Content | None = None
        self._partitions = 2

    def _setup(self) -> Content:
        if self._content is None:
            self._content = build_checkpoint(self.env, self._partitions, users(300),
                                             grouped=False)
        return self._content

    def _run(self, partitions: int, kill: str | None) -> tuple[int, str]:
        environment = dict(os.environ)
        environment.pop("DSTL_KILL_POINT", None)
        if kill is not None:
            environment["DSTL_KILL_POINT"] = kill
        done = subprocess.run([sys.executable, "-m", "pyspark_dstl", "rescale", self.env.url,
                               "--partitions", str(partitions), *self.tool_args],
                              env=environment, capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
        log = self.workdir / f"rescale-{self.rounds}.stderr"
        log.write_text(done.stderr)
        return done.returncode, done.stderr

    def reachable(self) -> tuple[str, ...]:
        """The points the next round's rescale passes: the migration's while the root is in
        the hash layout (only the first round), then the range rescale's."""
        self._setup()
        method = RANGE_POINTS if layout_is_grouped(self.env) else MIGRATION_POINTS
        return method + COMMIT_POINTS

    def round(self, point: str | None = None) -> None:
        """One killed rescale (at `point`, or one chosen at random among those it passes)
        and its rerun."""
        content = self._setup()
        reachable = self.reachable()
        if point is not None and point not in reachable:
            raise ValueError(f"kill point {point!r} is not passed by the next rescale "
                             f"(it passes {reachable})")
        self.rounds += 1
        target = self.rng.choice([n for n in range(1, MAX_PARTITIONS + 1)
                                  if n != self._partitions])
        point = point or self.rng.choice(reachable)
        count = (self.rng.randint(1, target)
                 if point in ("rescale_store_committed", "rescale_ranges_committed") else 1)
        code, stderr = self._run(target, f"{point}:{count}")
        reached = f"killed at {point}" in stderr
        if reached != (code == -9):
            raise CrashFailure(f"rescale round {self.rounds}: exit {code}, kill point "
                               f"{point}:{count} reached: {reached}\n{stderr[-2000:]}")
        try:
            grouped = layout_is_grouped(self.env)
            left = check_layout(self.env, content, grouped=grouped)
            if not grouped and (left != self._partitions or self.rounds > 1):
                raise AssertionError(f"the hash layout of {left} partitions after round "
                                     f"{self.rounds} (the first round migrates it)")
            if left not in (self._partitions, target):
                raise AssertionError(f"{left} partitions, neither the old {self._partitions} "
                                     f"nor the new {target}")
            if not reached and left != target:
                raise AssertionError(f"the rescale ended ({code}) without a kill but left "
                                     f"{left} partitions")
            code, stderr = self._run(target, None)
            if code != 0:
                raise AssertionError(f"the rerun failed ({code}): {stderr[-2000:]}")
            check_layout(self.env, content, target)
        except AssertionError as exc:
            raise CrashFailure(f"rescale round {self.rounds} ({self._partitions} -> {target}, "
                               f"killed at {point}:{count}): {exc}") from exc
        self._partitions = target
        if reached:
            self.stats.point_kills[point if point.startswith("rescale")
                                   else f"rescale_{point}"] += 1
        else:
            self.stats.points_not_reached += 1
