"""docs/deploying.md's command sequence runs: a packed environment on a standalone cluster."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.spark import REPO_ROOT, free_port

# its own timeout: the script below may take up to 900 s
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(960)]
SCRIPT = REPO_ROOT / "examples" / "deploy" / "run_standalone.sh"


def test_the_deploying_walkthrough_counts_every_row_on_a_standalone_cluster(
        tmp_path: Path) -> None:
    env = {**os.environ, "MASTER_PORT": str(free_port()), "MASTER_UI_PORT": str(free_port()),
           "WORKER_UI_PORT": str(free_port())}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "work")], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    committed = [line for line in done.stdout.splitlines() if line.startswith("committed")]
    assert [line.split()[2] for line in committed] == ["0:", "1:", "2:", "3:"], output[-4000:]
    state = [line for line in done.stdout.splitlines() if line.startswith("state ")]
    assert json.loads(state[-1][len("state "):]) == {f"user{u}": 4 for u in range(10)}
    assert (tmp_path / "work" / "environment" / "bin" / "python").exists()
