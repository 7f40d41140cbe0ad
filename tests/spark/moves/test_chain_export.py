"""A query that chains stateful steps after its transformWithState goes back to PySpark's own
operators with the state of every operator: it runs its first batches on PySpark, moves to this
backend in place (the switch), runs there, is exported (export-state with the chained query),
and runs its last batches on PySpark from the exported Spark checkpoint, the switch off; its
batches equal those of the same query run on PySpark without interruption, batch by batch
(tests/support/chain_compare.py). What cannot be exported exactly is refused by name, before
anything is written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

from pyspark_dstl import ExportStateError, export_state, read_state
from pyspark_dstl.backend.fencing.epochs import EPOCHS_PREFIX
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
from tests.support.chain_processors import TALLY_SCHEMA, RelayWithCloser, Tally, TallyRows
from tests.support.compat_processors import RunningCountPandas
from tests.support.move_processors import Journey, journey_entries_here, journey_entries_in_spark
from tests.support.tws_compare import session_conf, sorted_rows, write_input

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

MIGRATE = {"spark.dstl.query.sparkCheckpoint": "migrate"}
PHASES = (("pyspark", range(0, 2)), ("dropin", range(2, 4)), ("pyspark", range(4, len(STEPS))))


def window_counts(first: Any) -> Any:
    return first.groupBy(F.window("at", "10 seconds")).agg(
        F.count("*").alias("rows"), F.sum("v").alias("total"), F.max("v").alias("top"),
        F.avg("v").alias("mean"))


def key_totals(first: Any) -> Any:
    # a non-null key (the export stages it non-null, the nullability of the user's query)
    return first.groupBy(F.coalesce("k", F.lit("?")).alias("key")).agg(
        F.count("v").alias("rows"), F.sum("v").alias("total"), F.min("v").alias("low"),
        F.avg("v").alias("mean"), F.last("tag", ignorenulls=True).alias("tag"))


WINDOW_COUNTS = ChainScenario("window_counts", RelayWithCloser, window_counts,
                              restart_after=None)
KEY_TOTALS = ChainScenario("key_totals", RelayWithCloser, key_totals, output_mode="update",
                           restart_after=None)
DEDUPLICATED = ChainScenario("deduplicated", RelayWithCloser,
                             lambda first: first.dropDuplicates(["k"]), restart_after=None)


def run_there_and_back(spark: Any, scenario: ChainScenario, root: Path) -> tuple[Batches, Any]:
    """The scenario on PySpark, then on the switch (moved in place), then on PySpark again
    from the export; (every batch the sink received by batch id, the export's report)."""
    batches: Batches = {}
    report = None

    def sink(frame: Any, batch_id: int) -> None:
        batches[batch_id] = sorted_rows(frame.collect())

    inputs, location, exported = root / "in", root / "location", root / "exported"
    inputs.mkdir(parents=True, exist_ok=True)
    for engine, steps in PHASES:
        where = exported if report is not None else location
        with engine_settings(spark, engine), session_conf(spark, MIGRATE):
            query = (chain_query(spark, scenario, inputs).writeStream
                     .outputMode(scenario.output_mode).foreachBatch(sink)
                     .option("checkpointLocation", str(where)).start())
            try:
                for index in steps:
                    write_step(inputs, index, STEPS[index])
                    query.processAllAvailable()
            finally:
                query.stop()
            if engine == "dropin":
                report = export_state(spark, str(location), str(exported), scenario.first(),
                                      query=chain_query(spark, scenario, inputs),
                                      query_output_mode=scenario.output_mode)
    return batches, report


def assert_round_trip(spark: Any, scenario: ChainScenario, root: Path) -> Any:
    expected = run_chain(spark, scenario, "pyspark", root / "uninterrupted")
    actual, report = run_there_and_back(spark, scenario, root / "moved")
    assert actual == expected, describe(expected, actual)
    assert report is not None and report.chained
    return expected, report


@pytest.mark.slow  # a round trip: about 30-70 s
def test_a_windowed_aggregation_goes_back_to_pyspark_and_closes_its_windows_there(
        spark: Any, tmp_path: Path) -> None:
    expected, report = assert_round_trip(spark, WINDOW_COUNTS, tmp_path)
    assert "Spark's operator 0: groupBy(window(at" in report.chained[0]
    last_export_batch = report.batch_id
    assert any(rows for batch, rows in expected.items() if batch > last_export_batch), \
        "windows must close after the move back"


@pytest.mark.slow  # a round trip: about 30-70 s
def test_a_plain_key_aggregation_in_update_mode_goes_back_to_pyspark(
        spark: Any, tmp_path: Path) -> None:
    assert_round_trip(spark, KEY_TOTALS, tmp_path)
    schema = tmp_path / "moved" / "exported" / "state" / "0" / "0" / "_metadata" / "schema"
    assert schema.is_file(), "the aggregation's state schema is Spark's, checked at restart"


@pytest.mark.slow  # a round trip: about 30-70 s
def test_drop_duplicates_goes_back_to_pyspark_with_its_seen_keys(
        spark: Any, tmp_path: Path) -> None:
    expected, _ = assert_round_trip(spark, DEDUPLICATED, tmp_path)
    assert not any(row[0] == "a" for batch, rows in expected.items() if batch > 3
                   for row in rows), "keys seen before the export stay seen"


def files_without_leases(root: Path) -> dict[str, bytes]:
    """Every file of a location but the leases a move takes and gives back (epochs/)."""
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*"))
            if path.is_file() and not str(path.relative_to(root)).startswith(EPOCHS_PREFIX)}


def one_batch_location(spark: Any, scenario: ChainScenario, root: Path) -> Path:
    """A location of this backend that ran the scenario's first input step (one Spark query
    of one batch: the refusals need the location's records, not a long history)."""
    location = root / "location"
    (root / "in").mkdir(parents=True)
    with engine_settings(spark, "dropin"):
        query = (chain_query(spark, scenario, root / "in").writeStream
                 .outputMode(scenario.output_mode).foreachBatch(lambda frame, batch: None)
                 .option("checkpointLocation", str(location)).start())
        try:
            write_step(root / "in", 0, STEPS[0])
            query.processAllAvailable()
        finally:
            query.stop()
    return location


@pytest.mark.parametrize(("name", "build", "named"), [
    ("session_window", lambda first: first.groupBy("k", F.session_window("at", "5 seconds"))
     .agg(F.count("*")), "the state of a session window aggregation cannot be exported"),
    ("collect_list", lambda first: first.groupBy(F.window("at", "10 seconds")).agg(
        F.count("*"), F.collect_list("v").alias("vs")),
     "the aggregate 'vs' (collect_list) cannot be exported exactly"),
    ("decimal_avg", lambda first: first.groupBy("k").agg(
        F.avg(F.col("v").cast("decimal(10,2)")).alias("mean")),
     "the aggregate 'mean' (a decimal avg) cannot be exported exactly"),
])
def test_state_without_an_exact_spark_counterpart_is_refused_by_name_before_any_write(
        spark: Any, tmp_path: Path, name: str, build: Any, named: str) -> None:
    scenario = ChainScenario(name, RelayWithCloser, build,
                             output_mode="update" if name == "decimal_avg" else "append",
                             restart_after=None)
    location = one_batch_location(spark, scenario, tmp_path)
    before = files_without_leases(location)
    with engine_settings(spark, "dropin"), pytest.raises(ExportStateError) as refused:
        export_state(spark, str(location), str(tmp_path / "back"), RelayWithCloser(),
                     query=chain_query(spark, scenario, tmp_path / "in"),
                     query_output_mode=scenario.output_mode)
    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"checkpoint location {str(location)!r}, step 1 ")
    assert "(Spark's operator 0): " + named in first
    assert "keep the query on this backend" in first
    assert not (tmp_path / "back").exists()
    assert files_without_leases(location) == before


@pytest.mark.slow  # a round trip: about 30-70 s
def test_drop_duplicates_within_watermark_goes_back_to_pyspark_with_its_expiries(
        spark: Any, tmp_path: Path) -> None:
    scenario = ChainScenario("within_watermark", RelayWithCloser,
                             lambda first: first.dropDuplicatesWithinWatermark(["k"]),
                             restart_after=None)
    _, report = assert_round_trip(spark, scenario, tmp_path)
    assert "dropDuplicatesWithinWatermark" in report.chained[0]


SECOND_TRANSFORM = ChainScenario(
    "second_transform_with_state", RelayWithCloser,
    lambda first: first.groupBy("k").transformWithStateInPandas(
        Tally(), TALLY_SCHEMA, "Append", "EventTime"), restart_after=None)


@pytest.mark.slow  # a round trip: about 30-70 s
def test_a_chained_transform_with_state_goes_back_to_pyspark_with_its_state_and_timers(
        spark: Any, tmp_path: Path) -> None:
    expected, report = assert_round_trip(spark, SECOND_TRANSFORM, tmp_path)
    assert "Spark's operator 0: groupBy" in report.chained[0]
    assert any(row[4] == "total" for batch, rows in expected.items()
               if batch > report.batch_id for row in rows), \
        "the chained step's timers must fire after the move back"


@pytest.mark.slow  # a round trip: about 30-70 s
def test_a_chained_row_api_transform_with_state_goes_back_to_pyspark(
        spark: Any, tmp_path: Path) -> None:
    scenario = ChainScenario(
        "second_transform_with_state_rows", RelayWithCloser,
        lambda first: first.groupBy("k").transformWithState(
            TallyRows(), TALLY_SCHEMA, "Append", "EventTime"), restart_after=None)
    _, report = assert_round_trip(spark, scenario, tmp_path)
    assert "transformWithState(...)" in report.chained[0]


def journeys_after_counts(spark: Any, inputs: Path) -> Any:
    """A running count per user, then Journey (value, list and map state with TTL, processing-
    time timers) as the chained transformWithState, over the counts."""
    counts = (spark.readStream.schema("user string, v long").option("maxFilesPerTrigger", 1)
              .parquet(str(inputs)).groupBy("user").transformWithStateInPandas(
                  RunningCountPandas(), "user string, count long", "Update", "None"))
    return counts.withColumnRenamed("count", "v").groupBy("user").transformWithStateInPandas(
        Journey(), Journey.OUTPUT, "Update", "ProcessingTime")


@pytest.mark.slow  # about 40 s
def test_a_chained_transform_with_state_keeps_its_ttl_expiries_and_timers_in_spark(
        spark: Any, tmp_path: Path) -> None:
    """Read back through Spark's own state reader (operator 0, the chained step): every value,
    list element, map entry, TTL expiry and processing-time timer of the chained step, as
    this backend's reader shows them; its TTL'd values were written in two batches."""
    inputs, location, exported = tmp_path / "in", tmp_path / "location", tmp_path / "exported"
    frames = [pd.DataFrame({"user": ["a", "b", "a"], "v": pd.array([1, 5, 3], dtype="int64")}),
              pd.DataFrame({"user": ["b", "c"], "v": pd.array([7, 10], dtype="int64")})]
    with engine_settings(spark, "dropin"):
        for index, frame in enumerate(frames):
            if index:  # a later processing time: the second batch's writes expire later
                started = time.time()
                while time.time() - started < 1.2:
                    time.sleep(0.1)
            write_input(inputs, index, frame)
            query = (journeys_after_counts(spark, inputs).writeStream.outputMode("update")
                     .foreachBatch(lambda frame, batch: None).trigger(once=True)
                     .option("checkpointLocation", str(location)).start())
            query.awaitTermination()
        ours = read_state(spark, str(location), operator="stateful.1").toPandas()
        report = export_state(spark, str(location), str(exported), RunningCountPandas(),
                              query=journeys_after_counts(spark, inputs),
                              query_output_mode="update")
    assert report.batch_id == 1 and report.spark_batches >= 3  # stage 0, two write times

    mine = journey_entries_here(ours)
    assert len({value[1] for name, value in mine.items() if name[0] == "count"}) == 2, \
        "the chained step's TTL'd values must have been written at two processing times"
    assert mine == journey_entries_in_spark(spark, exported, 1, operatorId="0")


THREE_STEPS = ChainScenario(
    "three_stateful_steps", RelayWithCloser,
    lambda first: first.groupBy("k").transformWithStateInPandas(
        Tally(), TALLY_SCHEMA, "Append", "EventTime", eventTimeColumnName="at")
    .groupBy(F.window("at", "10 seconds")).count(), restart_after=None)


@pytest.mark.slow  # a round trip: about 40-80 s
def test_steps_after_a_chained_transform_with_state_go_back_through_its_writer(
        spark: Any, tmp_path: Path) -> None:
    _, report = assert_round_trip(spark, THREE_STEPS, tmp_path)
    assert [line.split(":")[0] for line in report.chained] == [
        "Spark's operator 1", "Spark's operator 0"]


def test_a_stateful_step_after_a_deduplication_is_refused_by_name_before_any_write(
        spark: Any, tmp_path: Path) -> None:
    scenario = ChainScenario(
        "dedup_then_tally", RelayWithCloser,
        lambda first: first.dropDuplicates(["k", "at"]).groupBy("k")
        .transformWithStateInPandas(Tally(), TALLY_SCHEMA, "Append", "EventTime"),
        restart_after=None)
    location = one_batch_location(spark, scenario, tmp_path)
    before = files_without_leases(location)
    with engine_settings(spark, "dropin"), pytest.raises(ExportStateError) as refused:
        export_state(spark, str(location), str(tmp_path / "back"), RelayWithCloser(),
                     query=chain_query(spark, scenario, tmp_path / "in"))
    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"checkpoint location {str(location)!r}, step 1 ")
    assert "(Spark's operator 1): a stateful step follows it" in first
    assert "cannot pass Spark's operator of dropDuplicates without becoming its state" in first
    assert not (tmp_path / "back").exists()
    assert files_without_leases(location) == before


def test_a_chained_processor_declaring_other_state_is_refused_by_name_before_any_write(
        spark: Any, tmp_path: Path) -> None:
    class Tally(StatefulProcessor):  # the name the location recorded, other declarations
        def init(self, handle: Any) -> None:
            handle.getListState("tally", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            return iter(())

    location = one_batch_location(spark, SECOND_TRANSFORM, tmp_path)
    before = files_without_leases(location)
    changed = ChainScenario(
        "changed_tally", RelayWithCloser,
        lambda first: first.groupBy("k").transformWithStateInPandas(
            Tally(), TALLY_SCHEMA, "Append", "EventTime"), restart_after=None)
    with engine_settings(spark, "dropin"), pytest.raises(ExportStateError) as refused:
        export_state(spark, str(location), str(tmp_path / "back"), RelayWithCloser(),
                     query=chain_query(spark, changed, tmp_path / "in"))
    first = str(refused.value).splitlines()[0]
    assert first.startswith("step 1 groupBy(k).transformWithStateInPandas(...) (Spark's "
                            "operator 0): state variable 'tally' (value state): Tally.init() "
                            "declares it as list state")
    assert not (tmp_path / "back").exists()
    assert files_without_leases(location) == before
