"""Running a benchmark script as docs/benchmarks.md shows it: `python -m benchmarks.<name>
--quick ...` in a subprocess from the repository's root, its JSON written to a temporary
directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.paths import REPO_ROOT


def quick_command(name: str, out: Path, extra: Sequence[str] = ()) -> list[str]:
    """The script's --quick command line writing everything under `out`."""
    return [sys.executable, "-m", f"benchmarks.{name}", "--quick", *extra,
            "--out-dir", str(out), "--work-dir", str(out / "work")]


def script_environment() -> dict[str, str]:
    """This process's environment with the repository's root first on PYTHONPATH, without the
    tests' freeze of every Python worker (the scripts measure what users run)."""
    env = dict(os.environ)
    env.pop("DSTL_TESTS_FREEZE_AFTER_COLLECT", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def run_quick(name: str, out: Path, extra: Sequence[str] = (), timeout: float = 300,
              ) -> dict[str, Any]:
    """Run the script to its end and return its result JSON (`out/<name>.json`); its output
    goes into the assertion message when it fails."""
    done = subprocess.run(quick_command(name, out, extra), cwd=REPO_ROOT,
                          env=script_environment(), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    return data
