"""Spark's `statestore` source on a location moved in place (spark/moves/in_place.py): the
batch the move committed reads as Spark's own operator's state read before the move, and the
batches run here after it read as an uninterrupted PySpark run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pyspark_dstl
from tests.spark.moves.test_in_place import FRAMES, MIGRATE, run_counts
from tests.support.compat_runs import write_inputs
from tests.support.state_data import plain
from tests.support.tws_compare import session_conf

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def counts_at(spark: Any, location: Path, batch_id: int | None = None) -> list[Any]:
    reader = spark.read.format("statestore").option("stateVarName", "count")
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    return sorted((plain(row) for row in reader.load(str(location)).collect()), key=repr)


def test_a_location_moved_in_place_reads_as_sparks_state_before_and_after_the_move(
        spark: Any, tmp_path: Path) -> None:
    location = tmp_path / "ckpt"
    write_inputs(tmp_path / "in", FRAMES[:2])
    run_counts(spark, tmp_path / "in", location, tmp_path / "out", switch=False)
    before_move = counts_at(spark, location)  # Spark's own source on Spark's own checkpoint
    write_inputs(tmp_path / "in", FRAMES[2:], start=2)
    with session_conf(spark, MIGRATE):
        run_counts(spark, tmp_path / "in", location, tmp_path / "out", switch=True)
    write_inputs(tmp_path / "reference-in", FRAMES)
    run_counts(spark, tmp_path / "reference-in", tmp_path / "reference", tmp_path / "ref-out",
               switch=False)
    uninterrupted = counts_at(spark, tmp_path / "reference")

    pyspark_dstl.install()
    try:
        moved_batch = counts_at(spark, location, batch_id=1)
        newest = counts_at(spark, location)
    finally:
        pyspark_dstl.uninstall()
    assert before_move and moved_batch == before_move
    assert uninterrupted and newest == uninterrupted
