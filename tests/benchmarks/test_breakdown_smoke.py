"""The breakdown benchmark runs end to end in its --quick form (as docs/benchmarks.md shows it,
in a subprocess, JSON to a temporary directory), so its reading of Spark's UI and of this
library's timers cannot rot unnoticed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.benchmark_runs import run_quick

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BATCH = "batch (engine: triggerExecution)"
ADD_BATCH = "addBatch: foreachBatch"


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("breakdown")
    return run_quick("breakdown", out, ["--workloads", "small,timers", "--img-dir", str(out)],
                     timeout=400)


def test_the_record_names_its_command_machine_load_and_commit(result: dict[str, Any]) -> None:
    assert result["command"].startswith("python -m benchmarks.breakdown --quick")
    assert len(result["machine"]["load_average"]) == 3
    assert len(result["load_average_at_end"]) == 3
    assert result["machine"]["git_commit"]


def test_every_variant_of_every_workload_has_a_table(result: dict[str, Any]) -> None:
    assert set(result["breakdown"]) == {"small", "timers"}
    assert set(result["breakdown"]["small"]) == {"a", "a2", "a3", "s", "d"}
    assert set(result["breakdown"]["timers"]) == {"vectorized", "per_key"}
    for variants in result["breakdown"].values():
        for rows in variants.values():
            assert rows["batches"] >= 1 and rows[BATCH] > rows[ADD_BATCH] > 0


def test_the_driver_parts_of_a_dstl_batch_add_up_to_spark_add_batch(
        result: dict[str, Any]) -> None:
    for mode in ("a", "a2", "a3", "s"):
        rows = result["breakdown"]["small"][mode]
        parts = ("stateful stage (driver)", "sink (driver)", "commit log",
                 "other in addBatch (not split)")
        assert sum(rows[p] for p in parts) == pytest.approx(rows[ADD_BATCH])
        assert rows["other in addBatch (not split)"] >= 0


def test_the_state_job_is_found_by_its_tag_with_its_two_stages(result: dict[str, Any]) -> None:
    for mode in ("a", "a2", "a3", "s"):
        rows = result["breakdown"]["small"][mode]
        assert rows["its job: read, shuffle, Python tasks"] > 0
        assert rows["stage 1 does"] == "scan -> shuffle write, 1 tasks"
        assert rows["stage 2 does"] == "shuffle read -> result, 4 tasks"
        assert 0 < rows["slowest Python task (inside its stage)"] < rows[
            "its job: read, shuffle, Python tasks"]


def test_the_slowest_task_splits_into_input_load_processor_and_commit(
        result: dict[str, Any]) -> None:
    for rows in (result["breakdown"]["small"]["a2"], result["breakdown"]["timers"]["per_key"]):
        parts = ("input: shuffle read + Arrow to Python (not split)", "store load + hand-off",
                 "processor, state reads and writes (not split)", "commit",
                 "other in the task (not split)")
        assert all(rows[p] >= 0 for p in parts[:-1])
        assert sum(rows[p] for p in parts) == pytest.approx(
            rows["slowest Python task (inside its stage)"])
        assert rows["wait for the durable changelog (upload)"] > 0


def test_spark_native_count_shows_its_state_stage_and_operator_timers(
        result: dict[str, Any]) -> None:
    rows = result["breakdown"]["small"]["d"]
    assert "shuffle read -> shuffle write" in rows["stage 2 does"]
    assert rows["native state operator: commitTimeMs, summed over tasks"] >= 0
    assert rows["stateful stage (driver)"] is None  # no such clock in Spark's own operator


def test_the_progress_branch_costs_no_spark_job_of_its_own(result: dict[str, Any]) -> None:
    small = result["breakdown"]["small"]
    assert small["a2"]["Spark jobs per batch"] == small["a3"]["Spark jobs per batch"]
