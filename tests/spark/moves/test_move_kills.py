"""Crash safety of the moves: a real process running the in-place move (a query on the switch
with sparkCheckpoint=migrate) or export-state is killed (SIGKILL) at each kill point of the
move. Afterwards neither engine runs on the half-moved location: Spark's operator refuses it
(the move marker, written first) and so does a query of this backend without `migrate`, naming
the interrupted move; the next start with `migrate` (or export-state again) finishes the move,
and the query goes on exactly as a PySpark run that was never interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import pyspark_dstl
from pyspark_dstl import LocationMovedError
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import write_inputs
from tests.support.move_job import EXPORT_POINTS, IN_PLACE_POINTS, SETTINGS, counts
from tests.support.spark import REPO_ROOT
from tests.support.tws_compare import PYSPARK_STATE_SETTINGS, await_query, session_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FRAMES = [pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]}),
          pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]}),
          pd.DataFrame({"user": ["b", "c", "c"], "page": ["x", "y", "z"]}),
          pd.DataFrame({"user": ["a", "d"], "page": ["x", "y"]})]
MIGRATE = {"spark.dstl.query.sparkCheckpoint": "migrate"}


def run_counts(spark: Any, inputs: Path, location: Path, output: Path, *, switch: bool,
               settings: dict[str, str] | None = None) -> None:
    with session_conf(spark, {**SETTINGS, **(settings or {}),
                              **({} if switch else PYSPARK_STATE_SETTINGS)}):
        if switch:
            pyspark_dstl.install()
        try:
            query = (counts(spark, str(inputs)).writeStream.format("parquet")
                     .outputMode("append").option("checkpointLocation", str(location))
                     .trigger(availableNow=True).start(str(output)))
        finally:
            if switch:
                pyspark_dstl.uninstall()
        await_query(query)


def killed(*arguments: str, point: str) -> None:
    """Run tests/support/move_job.py until DSTL_KILL_POINT kills it at `point`."""
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "DSTL_KILL_POINT": point}
    run = subprocess.run([sys.executable, "-m", "tests.support.move_job", *arguments],
                         cwd=REPO_ROOT, env=environment, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == -9, run.stdout + run.stderr[-3000:]
    assert f"killed at {point}" in run.stderr


def rows_of(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in spark.read.parquet(str(path)).collect())


@pytest.fixture(scope="module")
def expected(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, ...]]:
    """What readers of the sink see after an uninterrupted PySpark run over all four inputs."""
    root = tmp_path_factory.mktemp("reference")
    write_inputs(root / "in", FRAMES)
    run_counts(spark, root / "in", root / "location", root / "out", switch=False)
    return rows_of(spark, root / "out")


def assert_spark_refuses(spark: Any, inputs: Path, location: Path, output: Path,
                         words: str) -> None:
    before = sorted(p for p in location.rglob("*") if p.is_file())
    with pytest.raises(Exception) as refused:  # StreamingQueryException from Spark's thread
        run_counts(spark, inputs, location, output, switch=False)
    assert "MALFORMED_LOG_FILE" in str(refused.value) and words in str(refused.value)
    assert sorted(p for p in location.rglob("*") if p.is_file()) == before


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("point", IN_PLACE_POINTS)
def test_a_kill_in_the_in_place_move_leaves_a_location_no_engine_runs_until_a_start_finishes_it(
        spark: Any, tmp_path: Path, point: str, expected: list[tuple[Any, ...]]) -> None:
    inputs, location, output = tmp_path / "in", tmp_path / "location", tmp_path / "out"
    write_inputs(inputs, FRAMES[:2])
    run_counts(spark, inputs, location, output, switch=False)
    write_inputs(inputs, FRAMES[2:], start=2)

    killed("in-place", str(inputs), str(location), str(output), point=point)

    assert_spark_refuses(spark, inputs, location, output, "moved to pyspark-dstl after Spark's "
                                                          "batch 1 (in-place move)")
    with pytest.raises(LocationMovedError, match=r"an in-place move of Spark's checkpoint "
                                                 r"\(after Spark's batch 1\) was interrupted"):
        run_counts(spark, inputs, location, output, switch=True)
    run_counts(spark, inputs, location, output, switch=True, settings=MIGRATE)
    assert rows_of(spark, output) == expected


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("point", EXPORT_POINTS)
def test_a_kill_in_export_state_leaves_a_location_no_engine_runs_until_the_export_is_repeated(
        spark: Any, tmp_path: Path, point: str, expected: list[tuple[Any, ...]]) -> None:
    inputs, location, output = tmp_path / "in", tmp_path / "location", tmp_path / "out"
    exported = tmp_path / "exported"
    write_inputs(inputs, FRAMES[:2])
    run_counts(spark, inputs, location, output, switch=True)

    killed("export", str(location), str(exported), point=point)

    assert_spark_refuses(spark, inputs, location, output, "moved back to Spark's operator by "
                                                          "export-state after batch 1")
    with pytest.raises(LocationMovedError, match=r"an export-state of its state to the Spark "
                                                 r"checkpoint .* was interrupted"):
        run_counts(spark, inputs, location, output, switch=True)
    with session_conf(spark, SETTINGS):
        pyspark_dstl.export_state(spark, str(location), str(exported), RunningCountPandas())
    write_inputs(inputs, FRAMES[2:], start=2)
    run_counts(spark, inputs, exported, output, switch=False)
    assert rows_of(spark, output) == expected
    assert not (tmp_path / ".exported.exporting").exists()
