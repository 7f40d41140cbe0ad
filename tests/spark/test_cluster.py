"""A Spark standalone cluster on loopback loses a worker in the middle of a run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.spark import (
    REPO_ROOT,
    StandaloneCluster,
    count_model,
    make_batches,
    prepare_environment,
    write_batches,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    try:
        started = StandaloneCluster(tmp_path / "cluster").start()
    except RuntimeError as exc:
        pytest.skip(f"a standalone cluster cannot start here: {exc}")
    yield started
    started.stop()


def test_query_recovers_from_a_lost_worker_with_exact_state(cluster: Any,
                                                            tmp_path: Path) -> None:
    frames = make_batches(8, rows=2000, keys=500, seed=21)
    write_batches(tmp_path / "in", frames)
    prepare_environment()
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.support.spark", cluster.url, str(tmp_path / "in"),
         str(tmp_path / "ckpt"), str(tmp_path / "local")],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    killed_after: int | None = None
    assert driver.stdout is not None
    deadline = time.monotonic() + 300  # generous: six JVMs start on two cores here
    for line in driver.stdout:
        lines.append(line)
        if line.startswith("committed batch") and killed_after is None \
                and int(line.split()[-1]) >= 2:
            killed_after = int(line.split()[-1])
            cluster.kill_worker(0)
        assert time.monotonic() < deadline, "".join(lines[-30:])
    assert driver.wait(timeout=60) == 0, "".join(lines[-40:])
    committed = [int(line.split()[-1]) for line in lines if line.startswith("committed batch")]
    assert killed_after is not None and committed == list(range(8))
    states = [line[len("state "):] for line in lines if line.startswith("state ")]
    assert states and json.loads(states[-1]) == count_model(frames)  # read back by the driver
