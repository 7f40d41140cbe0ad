"""The in-place move: a PySpark query ran on its checkpoint location with Spark's own operator;
the same code restarted there with `pyspark_dstl.install()` is refused by default (nothing
written, the command given), moves the state in place with `sparkCheckpoint=migrate`, and goes
on exactly as a PySpark run that was never interrupted. Afterwards Spark's own operator refuses
the location, naming the move."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import pyspark_dstl
from pyspark_dstl import LocationMovedError, SparkCheckpointHereError
from pyspark_dstl.cli import main as cli_main
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream, write_inputs
from tests.support.tws_compare import PYSPARK_STATE_SETTINGS, await_query, session_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow]

USERS = "user string, page string"
COUNTS = "user string, count long"
FRAMES = [pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]}),
          pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]}),
          pd.DataFrame({"user": ["b", "c", "c"], "page": ["x", "y", "z"]}),
          pd.DataFrame({"user": ["a", "d"], "page": ["x", "y"]})]
MIGRATE = {"spark.dstl.query.sparkCheckpoint": "migrate"}


def files_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def run_counts(spark: Any, inputs: Path, checkpoint: Path, output: Path, *,
               switch: bool) -> None:
    """The README's kind of query, word for word on both engines: a running count per user
    into a parquet sink, availableNow; `switch`: with pyspark_dstl.install()."""
    settings = {} if switch else PYSPARK_STATE_SETTINGS
    with session_conf(spark, settings):
        if switch:
            pyspark_dstl.install()
        try:
            counts = input_stream(spark, inputs, USERS).groupBy("user").transformWithStateInPandas(
                RunningCountPandas(), COUNTS, "Update", "None")
            query = (counts.writeStream.format("parquet").outputMode("append")
                     .option("checkpointLocation", str(checkpoint))
                     .trigger(availableNow=True).start(str(output)))
        finally:
            if switch:
                pyspark_dstl.uninstall()
        await_query(query)


def sink_log(output: Path) -> list[str]:
    """The batch ids in a file sink's log (Spark's `_spark_metadata`), checksums left out."""
    return sorted(name for name in os.listdir(output / "_spark_metadata") if name.isdigit())


def rows_of(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in spark.read.parquet(str(path)).collect())


def test_the_switch_on_sparks_own_checkpoint_is_refused_before_anything_is_written(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", FRAMES[:2])
    checkpoint = tmp_path / "ckpt"
    run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)
    before = files_under(checkpoint)
    write_inputs(tmp_path / "in", FRAMES[2:3], start=2)

    with pytest.raises(SparkCheckpointHereError) as refused:
        run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=True)

    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"checkpoint location {str(checkpoint)!r} holds Spark's own "
                            f"streaming checkpoint (batches up to 1 committed by Spark's "
                            f"operator) and no state of pyspark-dstl")
    command = (f"python -m pyspark_dstl import-state {checkpoint} {checkpoint} --processor "
               f"tests.support.compat_processors:RunningCountPandas")
    assert command in first
    assert "spark.dstl.query.sparkCheckpoint=migrate" in first
    assert files_under(checkpoint) == before  # nothing written: no engine/, no moves/
    assert rows_of(spark, tmp_path / "out") == [("a", 2), ("a", 3), ("b", 1), ("c", 1)]


def test_migrate_moves_the_state_in_place_and_the_query_goes_on_as_if_never_stopped(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's sequence: two batches on PySpark, the switch on the same location, a third
    and fourth input: the parquet sink holds what an uninterrupted PySpark run writes."""
    write_inputs(tmp_path / "in", FRAMES[:2])
    checkpoint = tmp_path / "ckpt"
    run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)
    write_inputs(tmp_path / "in", FRAMES[2:], start=2)

    with session_conf(spark, MIGRATE), caplog.at_level(logging.WARNING):
        run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=True)

    write_inputs(tmp_path / "reference-in", FRAMES)
    run_counts(spark, tmp_path / "reference-in", tmp_path / "reference-ckpt",
               tmp_path / "reference-out", switch=False)
    assert rows_of(spark, tmp_path / "out") == rows_of(spark, tmp_path / "reference-out")
    assert sink_log(tmp_path / "out") == ["0", "1", "2", "3"]
    moved = [r.getMessage() for r in caplog.records
             if r.name == "pyspark_dstl.spark.moves.in_place"]
    assert len(moved) == 1 and "Spark's own checkpoint moved in place to pyspark-dstl: the " \
        "state of Spark's batch 1 (count) is this backend's batch 1, the query goes on with " \
        "batch 2" in moved[0]

    printed = io.StringIO()
    assert cli_main(["inspect", str(checkpoint)], out=printed) == 0
    text = printed.getvalue()
    assert "move: in-place move from Spark's operator after Spark's batch 1 (done)" in text
    assert "store 0/" not in text  # Spark's own stores, left as they were, are not ours


def test_sparks_operator_refuses_the_location_after_the_move_naming_it(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", FRAMES[:2])
    checkpoint = tmp_path / "ckpt"
    run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)
    printed = io.StringIO()
    assert cli_main(["import-state", str(checkpoint), str(checkpoint), "--processor",
                     "tests.support.compat_processors:RunningCountPandas"], out=printed) == 0
    assert printed.getvalue().startswith("moved in place batch 1: ")
    write_inputs(tmp_path / "in", FRAMES[2:3], start=2)
    before = files_under(checkpoint)

    with pytest.raises(Exception) as refused:  # StreamingQueryException, from Spark's thread
        run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)

    message = str(refused.value)
    assert "MALFORMED_LOG_FILE" in message
    assert ("pyspark-dstl: the state of this checkpoint moved to pyspark-dstl after Spark's "
            "batch 1 (in-place move)") in message
    assert files_under(checkpoint) == before
    assert sink_log(tmp_path / "out") == ["0", "1"]


def test_an_import_into_a_new_location_leaves_the_spark_checkpoint_to_no_engine(
        spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", FRAMES[:2])
    checkpoint, target = tmp_path / "ckpt", tmp_path / "dstl"
    run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)
    assert cli_main(["import-state", str(checkpoint), str(target), "--processor",
                     "tests.support.compat_processors:RunningCountPandas"],
                    out=io.StringIO()) == 0

    with pytest.raises(Exception) as refused:  # Spark's operator, from its thread
        run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=False)
    assert f"the state of this checkpoint was imported into {target} by pyspark-dstl after " \
        f"Spark's batch 1" in str(refused.value)
    with pytest.raises(LocationMovedError) as here:
        run_counts(spark, tmp_path / "in", checkpoint, tmp_path / "out", switch=True)
    assert str(here.value).startswith(
        f"checkpoint location {str(checkpoint)!r} is a Spark checkpoint whose state "
        f"import-state took to {target.as_uri()!r} (after Spark's batch 1): start the query "
        f"on checkpointLocation {str(target)!r}")
    printed = io.StringIO()
    assert cli_main(["inspect", str(target)], out=printed) == 0
    assert (f"move: import-state from the Spark checkpoint {checkpoint.as_uri()} after Spark's "
            f"batch 1 (done)") in printed.getvalue()
