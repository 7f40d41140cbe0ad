"""A query that chains stateful steps after its transformWithState moves from PySpark's own
operators to this backend with the state of every operator: it runs the first batches on
PySpark, its Spark checkpoint is imported (into a new location, or moved in place when the
query starts on the switch), it goes on on the switch, and its batches equal those of the same
query run on PySpark without interruption, batch by batch (tests/support/chain_compare.py).
What cannot be brought exactly is refused by name, before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from pyspark_dstl import ChainImportError, NoTransformWithStateError, import_state
from tests.support.chain_compare import (
    STEPS,
    Batches,
    ChainScenario,
    chain_query,
    describe,
    engine_settings,
    run_chain,
    write_step,
)
from tests.support.chain_processors import TALLY_SCHEMA, RelayWithCloser, Tally
from tests.support.tws_compare import session_conf, sorted_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SPLIT = 3  # input steps 0..2 run on PySpark, the rest on the switch
Move = Callable[[Any, ChainScenario, Path, Path], Path]  # -> the location the switch goes on in


def window_counts(first: Any) -> Any:
    return first.groupBy(F.window("at", "10 seconds")).agg(
        F.count("*").alias("rows"), F.sum("v").alias("total"), F.max("v").alias("top"),
        F.avg("v").alias("mean"))


def deduplicated_tallies(first: Any) -> Any:
    # a key's "closed" row comes while its entry, imported, still holds it
    return (first.dropDuplicatesWithinWatermark(["k"])
            .groupBy("k").transformWithStateInPandas(Tally(), TALLY_SCHEMA, "Append",
                                                     "EventTime"))


WINDOW_COUNTS = ChainScenario("window_counts", RelayWithCloser, window_counts,
                              restart_after=None)
DEDUP_THEN_TALLY = ChainScenario("dedup_then_tally", RelayWithCloser, deduplicated_tallies,
                                 restart_after=None)


def run_moved(spark: Any, scenario: ChainScenario, root: Path, move: Move) -> Batches:
    """The scenario's first SPLIT input steps on PySpark's operators, then `move`, then the
    other steps on the switch; every batch the sink received, by batch id."""
    batches: Batches = {}

    def sink(frame: Any, batch_id: int) -> None:
        batches[batch_id] = sorted_rows(frame.collect())

    inputs, spark_checkpoint = root / "in", root / "checkpoint-pyspark"
    inputs.mkdir(parents=True, exist_ok=True)
    for engine, steps in (("pyspark", range(SPLIT)), ("dropin", range(SPLIT, len(STEPS)))):
        with engine_settings(spark, engine):
            location = (spark_checkpoint if engine == "pyspark"
                        else move(spark, scenario, inputs, spark_checkpoint))
            query = (chain_query(spark, scenario, inputs).writeStream
                     .outputMode(scenario.output_mode).foreachBatch(sink)
                     .option("checkpointLocation", str(location)).start())
            try:
                for index in steps:
                    write_step(inputs, index, STEPS[index])
                    query.processAllAvailable()
            finally:
                query.stop()
    return batches


def into_new_location(spark: Any, scenario: ChainScenario, inputs: Path,
                      spark_checkpoint: Path) -> Path:
    location = spark_checkpoint.parent / "checkpoint-dstl"
    report = import_state(spark, str(spark_checkpoint), str(location), scenario.first(),
                          query=chain_query(spark, scenario, inputs),
                          output_mode=scenario.output_mode)
    assert report.chained and "Spark's operator 0: stateStoreSave as step 1" in report.chained[0]
    return location


def migrated_at_start(spark: Any, scenario: ChainScenario, inputs: Path,
                      spark_checkpoint: Path) -> Path:
    spark.conf.set("spark.dstl.query.sparkCheckpoint", "migrate")
    return spark_checkpoint


def test_a_windowed_aggregation_after_transform_with_state_goes_on_here_after_import_state(
        spark: Any, tmp_path: Path) -> None:
    expected = run_chain(spark, WINDOW_COUNTS, "pyspark", tmp_path / "uninterrupted")
    actual = run_moved(spark, WINDOW_COUNTS, tmp_path / "moved", into_new_location)
    assert any(rows for batch, rows in expected.items() if batch > SPLIT), \
        "windows must close after the import"
    assert actual == expected, describe(expected, actual)


def test_dedup_and_a_second_transform_with_state_go_on_here_after_the_in_place_move(
        spark: Any, tmp_path: Path) -> None:
    expected = run_chain(spark, DEDUP_THEN_TALLY, "pyspark", tmp_path / "uninterrupted")
    with session_conf(spark, {"spark.dstl.query.sparkCheckpoint": "refuse"}):
        actual = run_moved(spark, DEDUP_THEN_TALLY, tmp_path / "moved", migrated_at_start)
    assert any(rows for batch, rows in expected.items() if batch > SPLIT)
    assert actual == expected, describe(expected, actual)
    moves = sorted((tmp_path / "moved" / "checkpoint-pyspark" / "moves").iterdir())
    assert moves, "the in-place move leaves its record"


def test_steps_whose_spark_state_has_no_exact_counterpart_are_refused_by_name(
        spark: Any, tmp_path: Path) -> None:
    lists = ChainScenario("window_lists", RelayWithCloser, lambda first: first.groupBy(
        F.window("at", "10 seconds")).agg(F.count("*"), F.collect_list("v").alias("vs")),
        restart_after=None)
    root = tmp_path / "lists"
    run_chain(spark, lists, "pyspark", root)
    source, target = root / "checkpoint-pyspark", tmp_path / "dstl"
    with engine_settings(spark, "dropin"):
        query = chain_query(spark, lists, root / "in")
        with pytest.raises(ChainImportError) as collected:
            import_state(spark, str(source), str(target), RelayWithCloser(), query=query)
        first = str(collected.value).splitlines()[0]
        assert "operator 0: stateStoreSave" in first and "'vs' (collect_list)" in first
        assert "cannot be imported exactly" in first
        assert "start the chained query on this backend from its input" in first

        other = chain_query(spark, ChainScenario("dedup", RelayWithCloser, lambda first:
                                                 first.dropDuplicates(["k"])), root / "in")
        with pytest.raises(ChainImportError) as mismatched:
            import_state(spark, str(source), str(target), RelayWithCloser(), query=other)
        assert ("Spark ran an aggregation there, but step 1 of the query is dropDuplicates"
                in str(mismatched.value).splitlines()[0])

        with pytest.raises(NoTransformWithStateError) as without_query:
            import_state(spark, str(source), str(target), RelayWithCloser())
        assert "query=<the chained DataFrame>" in str(without_query.value).splitlines()[0]
    assert not target.exists()


def test_a_session_window_aggregation_is_refused_by_name(spark: Any, tmp_path: Path) -> None:
    sessions = ChainScenario("sessions", RelayWithCloser, lambda first: first.groupBy(
        "k", F.session_window("at", "5 seconds")).agg(F.count("*")), restart_after=None)
    root = tmp_path / "sessions"
    run_chain(spark, sessions, "pyspark", root)
    target = tmp_path / "dstl"
    with engine_settings(spark, "dropin"), pytest.raises(ChainImportError) as refused:
        import_state(spark, str(root / "checkpoint-pyspark"), str(target), RelayWithCloser(),
                     query=chain_query(spark, sessions, root / "in"))
    first = str(refused.value).splitlines()[0]
    assert "operator 0: sessionWindowStateStoreSaveExec" in first
    assert "the state of a session window aggregation cannot be imported exactly" in first
    assert not target.exists()
