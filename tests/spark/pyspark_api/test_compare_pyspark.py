"""PySpark's transformWithStateInPandas and this backend, side by side on real PySpark.

Every scenario runs one processor written against pyspark.sql.streaming.StatefulProcessor,
unchanged, through PySpark's own operator (RocksDB state store) and through this backend's
compatibility entry point in the same SparkSession, and the sinks must receive the same rows in
the same batches (tests/support/tws_compare.py says how batches are lined up and what is
normalised). PySpark's run of a scenario is made once per session and shared.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import tws_processors as tp
from tests.support.tws_compare import (
    ReferenceRuns,
    Run,
    Workspace,
    assert_same_batches,
    dstl_view,
    pyspark_view,
    run_phases,
    run_steps,
)
from tests.support.tws_scenarios import (
    DEDUP,
    EVENT_TIMERS,
    INITIAL_STATE,
    LATE_ROWS,
    LIST_STATE,
    MAP_STATE,
    PROCESSING_TIMERS,
    RUNNING_COUNT,
    SESSION_WINDOWS,
    TIMER_AT_WATERMARK,
    TIMER_BOOKKEEPING,
    TOP_K,
    TTL,
    Scenario,
)
from tests.support.versions import needs_row_api

# Several queries per test, each start costing seconds on a loaded machine: a roomier limit.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]



def compare(spark: Any, reference: ReferenceRuns, scenario: Scenario, tmp_path: Path) -> Run:
    expected = reference.get(scenario)
    actual = run_phases(spark, scenario, "dstl", Workspace(tmp_path))
    assert_same_batches(expected, actual)
    return actual


# --- state kinds, no time ------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [RUNNING_COUNT, LIST_STATE, MAP_STATE, INITIAL_STATE],
                         ids=lambda s: s.name)
def test_state_kinds_give_the_same_batches_as_pyspark(spark: Any, reference: ReferenceRuns,
                                                      scenario: Scenario,
                                                      tmp_path: Path) -> None:
    compare(spark, reference, scenario, tmp_path)


@needs_row_api
def test_row_based_top_k_gives_the_same_batches_as_pyspark_transform_with_state(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    compare(spark, reference, TOP_K, tmp_path)


# --- processing time: step by step, every step a restart -----------------------------------


@pytest.mark.parametrize("scenario", [TTL, PROCESSING_TIMERS], ids=lambda s: s.name)
def test_processing_time_steps_give_the_same_batches_as_pyspark(spark: Any, scenario: Scenario,
                                                                tmp_path: Path) -> None:
    """Each step restarts both queries on their checkpoints, so processing-time timers and
    TTLs registered before a restart expire after it, as if the query had kept running."""
    runs = run_steps(spark, scenario, Workspace(tmp_path))
    expected, actual = runs["pyspark"], runs["dstl"]
    assert expected.runs == [[i] for i in range(len(scenario.batches))]
    assert_same_batches(expected, actual)


# --- event time ----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", [EVENT_TIMERS, SESSION_WINDOWS, DEDUP],
                         ids=lambda s: s.name)
def test_event_time_gives_the_same_batches_as_pyspark(spark: Any, reference: ReferenceRuns,
                                                      scenario: Scenario,
                                                      tmp_path: Path) -> None:
    """Watermark, late rows dropped, timers of keys without rows, and the batch without data
    after the last file (the watermark moved): all as PySpark does them."""
    actual = compare(spark, reference, scenario, tmp_path)
    assert len(actual.batches) == len(scenario.batches) + 1  # the no-data batch


def test_late_rows_are_dropped_and_null_event_times_kept_as_pyspark_does(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    actual = compare(spark, reference, LATE_ROWS, tmp_path)
    seen = {row[0] for rows in actual.batches.values() for row in rows}
    assert {"d", "f", "g"}.isdisjoint(seen) and {"e", "h"} <= seen


def test_timer_registered_and_deleted_in_the_same_batch_never_fires(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    actual = compare(spark, reference, TIMER_BOOKKEEPING, tmp_path)
    inputs = [row for rows in actual.batches.values() for row in rows if row[1] == "input"]
    fired = {row[2] for rows in actual.batches.values() for row in rows if row[1] == "fired"}
    deleted = {base + offset for (_, _, base, _) in inputs for offset in (1_000, 3_000)}
    assert fired and not fired & deleted


def test_timer_registered_at_the_watermark_fires_in_the_same_batch(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    actual = compare(spark, reference, TIMER_AT_WATERMARK, tmp_path)
    kinds = {batch: {(row[0], row[1]) for row in rows} for batch, rows in actual.batches.items()}
    assert {("b", "input"), ("b", "fired")} <= kinds[1]
    assert ("a", "fired") in kinds[2]  # re-armed while firing, already due: the next batch


# --- restarts and failures -----------------------------------------------------------------


def test_restart_with_timers_pending_fires_them_as_if_never_stopped(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    """Stop after batch 2 with event-time timers pending, add the last file, restart on the
    same checkpoint: the same batches as PySpark's uninterrupted run (the split falls where
    the watermark did not move, so no batch is due in between)."""
    expected = reference.get(EVENT_TIMERS)
    actual = run_phases(spark, EVENT_TIMERS, "dstl", Workspace(tmp_path),
                        phases=[[0, 1, 2], [3]])
    assert actual.runs == [[0, 1, 2], [3, 4]]
    assert_same_batches(expected, actual)
    at_stop = dstl_view(spark, tmp_path / "ckpt-dstl", batch_id=2)
    assert at_stop.timers  # timers were pending when the query stopped
    assert at_stop == pyspark_view(spark, expected.checkpoint, ("count", "newest"), batch_id=2)


@pytest.mark.parametrize("processor", [tp.FailingTimeoutProcessor, tp.FailAfterTimersProcessor],
                         ids=["fails-in-a-timer", "fails-after-commit"])
def test_task_retried_while_timers_fire_gives_exact_output_and_state(
        spark: Any, reference: ReferenceRuns, processor: type, tmp_path: Path) -> None:
    markers = tmp_path / "failures"
    markers.mkdir()
    expected = reference.get(EVENT_TIMERS)
    actual = run_phases(spark, EVENT_TIMERS, "dstl", Workspace(tmp_path),
                        processor=processor(str(markers)))
    assert_same_batches(expected, actual)
    timer_batches = {batch for batch, rows in expected.batches.items()
                     if any(row[4] == "fired" for row in rows)}
    assert {int(p.name.split("-")[1]) for p in markers.iterdir()} == timer_batches
    assert dstl_view(spark, tmp_path / "ckpt-dstl") == \
        pyspark_view(spark, expected.checkpoint, ("count", "newest"))


# --- executor loss (standalone cluster, slow) ----------------------------------------------


@pytest.mark.slow
def test_executor_lost_while_timers_are_due_gives_the_same_batches(
        spark: Any, reference: ReferenceRuns, tmp_path: Path) -> None:
    """A standalone cluster with two one-core workers; after batch 0 the driver pauses, the
    test kills worker 0 (its executor and Python workers with it), and batch 1, which fires
    a timer, runs on the one executor left."""
    from tests.support.spark import REPO_ROOT, StandaloneCluster, prepare_environment

    expected = reference.get(EVENT_TIMERS)
    try:
        cluster = StandaloneCluster(tmp_path / "cluster").start()
    except RuntimeError as exc:
        pytest.skip(f"a standalone cluster cannot start here: {exc}")
    go_file = tmp_path / "go"
    lines: list[str] = []
    try:
        prepare_environment()
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.support.tws_compare", cluster.url,
             EVENT_TIMERS.name, str(tmp_path / "work"), str(tmp_path / "local"), str(go_file)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert driver.stdout is not None
        deadline = time.monotonic() + 300  # generous: six JVMs start on two cores here
        for line in driver.stdout:
            lines.append(line)
            if line.startswith("batch 0 "):
                cluster.kill_worker(0)
                go_file.touch()
            assert time.monotonic() < deadline, "".join(lines[-30:])
        assert driver.wait(timeout=60) == 0, "".join(lines[-40:])
    finally:
        cluster.stop()
    events = [line.split()[0] + " " + line.split()[1] for line in lines
              if line.startswith(("batch ", "executors "))]
    assert events[:3] == ["batch 0", "executors 1", "batch 1"], "".join(lines[-40:])
    batches = {int(line.split()[1]): [tuple(row) for row in json.loads(line.split(" ", 2)[2])]
               for line in lines if line.startswith("batch ")}
    assert batches == expected.batches
