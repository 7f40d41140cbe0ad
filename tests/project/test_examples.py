"""The README's main job and the dedup example run to the end and pass their own self-checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.spark import prepare_environment

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MainJobRun = tuple[Path, subprocess.CompletedProcess[str]]  # work directory, the finished run


def run_example(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    prepare_environment()  # workers run this interpreter on loopback
    done = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / name),
                           "--work-dir", str(tmp_path / "work"), *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def main_job(tmp_path_factory: pytest.TempPathFactory) -> MainJobRun:
    """One run of the README's main job, read by the tests below."""
    tmp_path = tmp_path_factory.mktemp("main_job")
    return tmp_path, run_example("main_job.py", tmp_path, "--files", "4", "--events", "1000")


@pytest.mark.version
def test_main_job_closes_silent_sessions_and_its_self_checks_pass(
        main_job: MainJobRun) -> None:
    out = main_job[1].stdout
    checks = [line for line in out.splitlines() if line.startswith(("ok ", "MISMATCH"))]
    assert len(checks) >= 3 and all(line.startswith("ok ") for line in checks), out[-2000:]


@pytest.mark.version
def test_main_job_keeps_its_table_readable_and_logs_json_lines_to_a_file(
        main_job: MainJobRun) -> None:
    tmp_path, done = main_job
    assert '"event": "dstl.batch"' not in done.stdout + done.stderr
    lines = (tmp_path / "work" / "progress.jsonl").read_text().splitlines()
    batches = [json.loads(line)["batch_id"] for line in lines]
    assert len(batches) >= 2 and batches == list(range(len(batches)))


def test_dedup_job_self_checks_pass(tmp_path: Path) -> None:
    out = run_example("dedup_job.py", tmp_path, "--files", "4", "--deliveries", "500").stdout
    checks = [line for line in out.splitlines() if line.startswith(("ok ", "MISMATCH"))]
    assert len(checks) >= 3 and all(line.startswith("ok ") for line in checks), out[-2000:]


def test_state_mirror_equals_the_state_readers_view_after_every_batch(tmp_path: Path) -> None:
    out = run_example("state_mirror.py", tmp_path, "--files", "3", "--events", "200").stdout
    checks = [line for line in out.splitlines() if line.startswith(("ok ", "MISMATCH"))]
    assert len(checks) == 3 and all(line.startswith("ok ") for line in checks), out[-2000:]


def readme_query() -> str:
    """The README's first Python block: the drop-in query a new user copies."""
    text = (REPO_ROOT / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_query_runs_as_written_and_writes_each_count_once(tmp_path: Path) -> None:
    prepare_environment()
    events = tmp_path / "events"
    events.mkdir()
    (events / "views.json").write_text("".join(
        f'{{"user": "{user}", "page": "p{n}"}}\n' for n, user in enumerate("aabac")))
    (tmp_path / "readme_query.py").write_text(readme_query())
    done = subprocess.run([sys.executable, "readme_query.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "|   a|    3|" in done.stdout and "|   c|    1|" in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "checkpoints" / "counts" / "commits").is_dir()
    assert (tmp_path / "out" / "counts" / "_spark_metadata" / "0").is_file()
