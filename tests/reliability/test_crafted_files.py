"""Crafted files cost a bounded multiple of their size to decode, and errors quote little.

Every case of crafted.py (huge declared sizes, counts and lengths, deep nesting, unknown ext
types, a zstd frame that expands 2^15 times) runs in one child process; each must fail with
the library's error for its kind, quickly, with a short message and a peak of Python
allocations within LIMIT. The headline case also runs end to end: `verify` in a process of its
own on a root holding the 2 kB file that declares 64 MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.child import REPO_ROOT
from tests.reliability.crafted import CASES, MIB, changelog, zstd_bomb

pytestmark = pytest.mark.slow
ERRORS = {
    "changelog": {"FormatError", "TruncatedFileError", "ChecksumMismatchError"},
    "payload": {"CorruptCheckpointError"},
    "manifest": {"ManifestError"},
    "commit_entry": {"CommitLogCorruptError"},
    "epoch": {"CorruptCheckpointError"},
}
MESSAGE_CHARS = 400
SECONDS = 5.0  # generous for a loaded machine: every case takes milliseconds here


def limit(file_bytes: int) -> int:
    """The most a decode may allocate: a few MiB plus 16 times the file."""
    return 4 * MIB + 16 * file_bytes


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "tests.reliability.crafted", "--json"],
                            capture_output=True, text=True, cwd=REPO_ROOT, env=child_env(),
                            timeout=600, check=True)
    return {outcome["name"]: outcome for outcome in json.loads(result.stdout)}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_crafted_file_fails_fast_small_and_with_a_short_message(
        outcomes: dict[str, dict[str, Any]], case: Any) -> None:
    outcome = outcomes[case.name]
    assert outcome["error"] in ERRORS[case.kind], outcome
    assert outcome["message_chars"] <= MESSAGE_CHARS, outcome
    assert outcome["peak_bytes"] <= limit(outcome["file_bytes"]), outcome
    assert outcome["seconds"] <= SECONDS, outcome


def run_verify(root: Path) -> tuple[int, str, int, float]:
    """(exit status, output, peak RSS in bytes, seconds) of `verify` in a child process."""
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "pyspark_dstl", "verify", root.as_uri()],
                               cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return (process.returncode, output.decode(errors="replace"), usage.ru_maxrss * 1024,
            time.monotonic() - started)


def test_verify_of_a_2_kb_file_declaring_64_mib_stays_small(tmp_path: Path) -> None:
    store = tmp_path / "bomb" / "state" / "agg" / "0"
    store.mkdir(parents=True)
    bomb = changelog([(1, zstd_bomb(64 * MIB))])
    assert len(bomb) < 4096
    (store / "1_0123456789abcdef0123456789abcdef.changelog").write_bytes(bomb)
    sound = tmp_path / "sound" / "state" / "agg" / "0"
    sound.mkdir(parents=True)
    (sound / "1_0123456789abcdef0123456789abcdef.changelog").write_bytes(changelog([]))
    _, _, baseline, _ = run_verify(tmp_path / "sound")
    status, output, peak, seconds = run_verify(tmp_path / "bomb")
    assert status == 1 and "declares 67108864 bytes" in output
    assert len(output) < 2000
    assert peak - baseline < 32 * MIB, (peak, baseline)
    assert seconds < 60
