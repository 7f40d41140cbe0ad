"""Every benchmark script runs end to end in its --quick form on tiny sizes, so the harness
cannot rot unnoticed.

Each script runs in a subprocess exactly as docs/benchmarks.md shows it (python -m
benchmarks.<name> --quick ...), with its JSON and plots sent to a temporary directory; the
tests read the JSON back. All scripts start together when the first test runs (they spend most
of their time importing and sleeping on the latency model); each test collects its own.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.latency import LatencyModel
from tests.support.benchmark_runs import REPO_ROOT, quick_command, script_environment

# whole scripts in subprocesses, some with their own S3 server: the full tier, not the fast one
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TINY = {
    "checkpoint_duration": ["--sizes", "300", "--checkpoints", "3"],
    "hedging": ["--persists", "20", "--warmup", "5"],
    "write_path": ["--keys", "2000", "--rounds", "2"],
    "recovery": ["--keys", "400", "--rounds", "1"],
    "space": ["--keys", "400", "--batches", "12"],
    "worker_memory": ["--keys", "2000", "--stores", "1,2", "--batches", "2"],
    "spark_e2e": ["--shape", "1e6", "--modes", "a2,b,c,s,d,e", "--files", "2"],
    "spark_timers": ["--modes", "vectorized,tws", "--keys", "400", "--fire-batches", "2"],
    "spark_output": ["--files", "1", "--rows-per-file", "500"],
    "rescale": ["--keys", "2000", "--rounds", "1"],
    "change_feed": ["--keys", "500", "--files", "2", "--rows", "600"],
    "spark_chain": ["--files", "2"],
    "worker_gc": ["--tasks", "4", "--rounds", "2"],
}
RESULTS = {"spark_e2e": "spark_e2e_1e6"}  # scripts whose results file is named after the shape
SCRIPT_TIMEOUT = 600  # a hang guard: five JVMs start at once beside the other test worker


def _command(name: str, out: Path) -> list[str]:
    return quick_command(name, out, [*TINY[name], "--img-dir", str(out)])


class Runs:
    """Every script started at once (they mostly wait on imports, sleeps and each other's
    I/O), each collected by its own test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: dict[str, tuple[subprocess.Popen[str], Path]] = {}

    def start_all(self) -> None:
        for name in TINY:
            out = self.root / name
            out.mkdir()
            with open(out / "log.txt", "w") as log:
                self.processes[name] = (subprocess.Popen(
                    _command(name, out), cwd=REPO_ROOT, env=script_environment(), stdout=log,
                    stderr=subprocess.STDOUT, text=True), out)

    def result(self, name: str) -> tuple[dict[str, Any], Path]:
        process, out = self.processes[name]
        process.wait(timeout=SCRIPT_TIMEOUT)
        log = (out / "log.txt").read_text()
        assert process.returncode == 0, f"{name} failed:\n{log[-4000:]}"
        return json.loads((out / f"{RESULTS.get(name, name)}.json").read_text()), out

    def stop(self) -> None:
        for process, _ in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    started = Runs(tmp_path_factory.mktemp("bench-smoke"))
    try:
        started.start_all()
        yield started
    finally:
        started.stop()


def test_checkpoint_duration_measures_every_mode_on_file_and_s3(runs: Runs) -> None:
    result, out = runs.result("checkpoint_duration")
    samples = result["samples"]
    assert set(samples) == {"file", "s3"}
    for by_size in samples.values():
        modes = by_size["300"]
        assert set(modes) == {"changelog", "changelog_in_commit", "incremental", "full"}
        for mode in modes.values():
            assert len(mode["durations"]) == 3
            assert all(d > 0 for d in mode["durations"])
            assert mode["total_bytes"] > 0
        # (a)'s engine write runs after its commit: the next transaction's wait is recorded
        assert len(modes["changelog"]["wait_seconds"]) == 3
        assert modes["changelog"]["engine_background_write_seconds"] > 0
        assert modes["changelog_in_commit"]["engine_background_write_seconds"] == 0
    assert len(result["goals"]) == 2
    assert all(goal["ratio"] > 0 for goal in result["goals"])
    assert (out / "checkpoint_duration.png").stat().st_size > 0
    assert (out / "checkpoint_duration_series.png").stat().st_size > 0


def test_hedging_compares_both_sides_with_proxy_request_counts(runs: Runs) -> None:
    result, out = runs.result("hedging")
    assert [len(result["samples"][side]) for side in ("off", "on")] == [20, 20]
    persists = {row[0]: row for row in result["tables"][0]["rows"]}
    headers = result["tables"][0]["headers"]
    puts = headers.index("PUTs")
    assert persists["off"][puts] == 20  # without hedging every persist is exactly one PUT
    assert persists["on"][puts] >= 20
    assert result["goals"][0]["benchmark"] == "2. hedging"
    assert (out / "hedging.png").stat().st_size > 0


def test_write_path_times_every_contender_every_round(runs: Runs) -> None:
    result, _ = runs.result("write_path")
    assert set(result["samples"]) == {"raw", "rocksdb", "memory", "rocksdb bulk",
                                      "memory bulk"}
    for rounds in result["samples"].values():
        assert len(rounds) == 2
        assert all(r["put_s"] > 0 and r["get_s"] > 0 for r in rounds)
    assert {goal["benchmark"] for goal in result["goals"]} == {
        "3. write path (rocksdb provider, put per key)",
        "3. write path (rocksdb provider, put_many columns)"}


def test_recovery_restores_every_checkpoint_and_replays_the_changelog(runs: Runs) -> None:
    result, _ = runs.result("recovery")
    for kind in ("file", "s3"):
        restores = result["samples"][kind]
        assert restores["snapshot + 0 batches"][0]["replayed_records"] == 0
        assert restores["snapshot + 5 batches"][0]["replayed_records"] == 5 * 4  # 1% of 400
        assert restores["snapshot only (final state)"][0]["replayed_records"] == 0
    assert len(result["goals"]) == 2


def test_rescale_reads_what_a_restore_reads_and_the_migration_moves_every_key(
        runs: Runs) -> None:
    result, _ = runs.result("rescale")
    for kind in ("file", "s3"):
        samples = result["samples"][kind]
        restore, rescale = samples["restore"][0], samples["rescale"][0]
        migration = samples["migration"][0]
        assert rescale["bytes_read"] == restore["bytes_read"] > 0
        assert rescale["bytes_uploaded"] + rescale["bytes_shared"] == rescale["bytes_written"]
        assert rescale["files_shared"] > 0
        assert migration["keys"] == 2000
        assert sum(migration["keys_per_partition"].values()) == 2000
    assert [set(r) for r in result["spark_samples"]] == [{"state_bytes", "to_seconds",
                                                          "back_seconds"}]
    assert len(result["goals"]) == 3


def test_space_measures_storage_after_every_batch_for_each_retention(runs: Runs) -> None:
    result, out = runs.result("space")
    assert [r["retain"] for r in result["samples"]] == [5, 10]
    for run in result["samples"]:
        assert len(run["ratio"]) == 12
        assert all(r > 0 for r in run["ratio"])
    # a goal row only where the lower bound (1 + retain x 1%) is within the 1.5x goal
    assert [g["benchmark"] for g in result["goals"]] == [
        "5. space (minBatchesToRetain=5)", "5. space (minBatchesToRetain=10)"]
    assert (out / "space.png").stat().st_size > 0


def test_worker_memory_measures_each_store_count_in_a_process_of_its_own(runs: Runs) -> None:
    result, _ = runs.result("worker_memory")
    samples = result["samples"]
    assert [r["stores"] for r in samples] == [1, 2]
    for run in samples:
        assert 0 < run["baseline"] < run["loaded"] <= run["peak"]
        assert run["steady"] <= run["peak"]


@pytest.mark.spark
def test_worker_gc_times_the_collections_of_every_task_before_and_after_the_freeze(
        runs: Runs) -> None:
    result, _ = runs.result("worker_gc")
    samples = result["samples"]
    assert 1 <= len(samples) <= 4 and len({task["worker"] for task in samples}) == len(samples)
    for task in samples:
        assert len(task["before_ms"]) == len(task["after_ms"]) == 2
        assert task["objects_after"] < task["objects_before"] // 10 < task["frozen"]


@pytest.mark.spark
def test_spark_end_to_end_variants_agree_batch_by_batch(runs: Runs) -> None:
    result, _ = runs.result("spark_e2e")
    assert "outputs of all variants agree batch by batch" in result["notes"]
    for variant in result["samples"].values():
        assert variant["recovery_seconds"] > 0
    # the slow variants read only their first file, the others both; all restart on one more
    assert {mode: v["rows"] for mode, v in result["samples"].items()} == {
        "a2": 2000, "b": 1000, "c": 1000, "s": 2000, "d": 2000, "e": 2000}
    assert "6. PySpark end to end, 1e6 shape, (s) the switch: transformWithStateInPandas" in [
        g["benchmark"] for g in result["goals"]]
    assert [g["benchmark"] for g in result["goals"]][-1] == (
        "6. PySpark end to end, 1e6 shape, (a') dstl vectorized")
    assert result["goals"][-1]["goal"] == "rows/s >= 0.5x (e) no-state floor"


@pytest.mark.spark
def test_spark_timers_fire_the_same_timers_in_every_contender(runs: Runs) -> None:
    result, out = runs.result("spark_timers")
    assert any(note.startswith("every contender emitted exactly the model's rows")
               for note in result["notes"])
    for variant in result["samples"].values():
        assert variant["register_rows"] == 401  # one row per key and the clock row
        assert variant["firing_batches"] == 2
        assert variant["timers_fired"] == 2 * 4  # 1% of 400 keys per batch
        assert variant["idle_batches"] == 1
        assert variant["extra_batches"] == []
    assert len({json.dumps(d, sort_keys=True) for d in result["digests"].values()}) == 1
    assert [goal["benchmark"] for goal in result["goals"]] == [
        "7. PySpark timers (a) dstl vectorized"]
    assert set(result["in_process"]) == {"vectorized"}
    assert (out / "spark_timers.png").stat().st_size > 0


@pytest.mark.spark
def test_spark_chain_contenders_agree_batch_by_batch(runs: Runs) -> None:
    result, out = runs.result("spark_chain")
    assert "outputs of all contenders agree batch by batch (windows and their counts)" in \
        result["notes"]
    assert {mode: v["rows"] for mode, v in result["samples"].items()} == {
        "a": 1000, "a2": 1000, "b": 1000}
    assert [goal["benchmark"] for goal in result["goals"]] == ["12. Chained query, the switch"]
    assert (out / "spark_chain.png").stat().st_size > 0


@pytest.mark.spark
def test_spark_output_runs_every_mode_and_the_stateful_outputs_agree(runs: Runs) -> None:
    result, out = runs.result("spark_output")
    assert set(result["samples"]) == {"floor", "files", "collect"}
    assert any(note.startswith("written outputs agree") for note in result["notes"])
    for mode in ("files", "collect"):
        run = result["samples"][mode]
        assert run["written"][0] == 500 and run["batches"] == 1
        assert run["rss_mb_series"]
        assert result["small_samples"][mode]["written"][0] == 300
    assert [goal["benchmark"] for goal in result["goals"]] == [
        "8. output as large as input (default outputMode files)"]
    assert (out / "spark_output.png").stat().st_size > 0
    assert (out / "spark_output_series.png").stat().st_size > 0


def test_latency_model_is_reproducible_and_has_the_configured_tail() -> None:
    class Put:
        content_length = 1_000_000

    model = LatencyModel(first_byte_median=0.02, first_byte_sigma=0.3, bandwidth=100e6,
                         tail_probability=0.02, tail_factor=10.0, seed=3)
    again = LatencyModel.from_dict(model.to_dict())
    draws = [model(Put()) for _ in range(20_000)]
    assert draws[:50] == [again(Put()) for _ in range(50)]
    slow = sum(1 for d in draws if d > 0.2)  # ten times a typical 30 ms: only the tail
    assert 0.015 < slow / len(draws) < 0.025
    assert min(draws) > 1_000_000 / 100e6  # the body's transfer time is always paid


def test_change_feed_reads_both_engines_feeds_and_times_the_stream(runs: Runs) -> None:
    result, _ = runs.result("change_feed")
    cost = result["cost"]
    for read in ("change feed", "state"):
        spark_rows, ours_rows = cost["pyspark"][read][1], cost["dropin"][read][1]
        assert spark_rows == ours_rows > 0  # one write per key and batch: the same rows
    lag = result["lag"]
    assert len(lag["final"]) == len(lag["committed"]) == 3  # every batch of the stream
    assert all(seconds >= 0 for seconds in lag["final"])
