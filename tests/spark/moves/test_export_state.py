"""export-state: a location's state goes back to PySpark's own operator. A query runs three
batches on PySpark, three on this backend (moved in place with the switch), and three on PySpark
again from the exported Spark checkpoint, with the switch uninstalled: batch by batch it equals
a PySpark run of nine batches that was never interrupted (foreachBatch and a parquet sink),
with value, list and map state, TTL and timers in processing and event time. Both locations left
behind refuse the engine that no longer owns them."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import pyspark_dstl
from pyspark_dstl import LocationMovedError, export_state, read_state
from pyspark_dstl.cli import main as cli_main
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import write_inputs
from tests.support.move_processors import (
    Journey,
    SessionRows,
    journey_entries_here,
    journey_entries_in_spark,
)
from tests.support.tws_compare import (
    COMPARE_SETTINGS,
    PYSPARK_STATE_SETTINGS,
    Run,
    assert_same_batches,
    await_query,
    session_conf,
    write_input,
)
from tests.support.tws_scenarios import at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MIGRATE = {"spark.dstl.query.sparkCheckpoint": "migrate"}
PAUSE_S = 1.5
Start = Callable[[Any, Path, Callable[[Any, int], None]], Any]  # (df, location, sink) -> query


def native(processor: Any, output: str, time_mode: str, rows: bool) -> Start:
    """PySpark's own query into foreachBatch, word for word on both engines (the switch
    decides which runs)."""

    def start(df: Any, location: Path, sink: Callable[[Any, int], None]) -> Any:
        grouped = df.groupBy("user")
        method = grouped.transformWithState if rows else grouped.transformWithStateInPandas
        out = method(statefulProcessor=processor, outputStructType=output,
                     outputMode="Update", timeMode=time_mode)
        return (out.writeStream.foreachBatch(sink).option("checkpointLocation", str(location))
                .trigger(once=True).start())

    return start


def native_to_files(processor: Any, output: str, time_mode: str, rows: bool) -> Start:
    """The same query into Spark's parquet file sink, next to its checkpoint location."""

    def start(df: Any, location: Path, sink: Callable[[Any, int], None]) -> Any:
        grouped = df.groupBy("user")
        method = grouped.transformWithState if rows else grouped.transformWithStateInPandas
        out = method(statefulProcessor=processor, outputStructType=output,
                     outputMode="Append", timeMode=time_mode)
        return (out.writeStream.format("parquet").outputMode("append")
                .option("checkpointLocation", str(location)).trigger(once=True)
                .start(str(location.parent / "out")))

    return start


def file_sink_rows(spark: Any, output: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(the batch ids of the sink's log, every row readers of the path see)."""
    log = sorted((n for n in os.listdir(output / "_spark_metadata") if n.isdigit()), key=int)
    return log, sorted(tuple(row) for row in spark.read.parquet(str(output)).collect())


def three_ways(spark: Any, root: Path, frames: list[pd.DataFrame], pauses: list[float],
               input_schema: str, watermark: tuple[str, str] | None, start: Start,
               processor: str) -> tuple[Run, Run, Any]:
    """(PySpark uninterrupted, PySpark -> switch in place -> PySpark on the export, the
    export's report): one batch per step in lockstep, the move after step 2, the export
    after step 5."""
    inputs = root / "in"
    reference, split = Run("pyspark"), Run("pyspark, dstl, pyspark")
    location, exported = root / "split" / "location", root / "split" / "exported"
    report = None

    def stream() -> Any:
        df = spark.readStream.schema(input_schema).option("maxFilesPerTrigger", 1).parquet(
            str(inputs))
        return df.withWatermark(*watermark) if watermark is not None else df

    def once(run: Run, where: Path, *, switch: bool = False) -> None:
        run.runs.append([])
        settings = MIGRATE if switch else PYSPARK_STATE_SETTINGS
        with session_conf(spark, settings):
            if switch:
                pyspark_dstl.install()
            try:
                query = start(stream(), where, run.sink)
            finally:
                if switch:
                    pyspark_dstl.uninstall()
            await_query(query)

    with session_conf(spark, COMPARE_SETTINGS):
        for index, frame in enumerate(frames):
            time.sleep(pauses[index])
            write_input(inputs, index, frame)
            once(reference, root / "reference" / "location")
            if index < 3:
                once(split, location)
            elif index < 6:
                once(split, location, switch=True)
            else:
                if report is None:
                    report = export_state(spark, str(location), str(exported), processor)
                once(split, exported)
    return reference, split, report


@pytest.mark.timeout(1800)
def test_a_processing_time_query_goes_to_dstl_and_back_as_if_never_stopped(
        spark: Any, tmp_path: Path) -> None:
    """Value, list and map state with TTL and processing-time timers (Journey): the state
    written here, TTL expiries and timer times included, is Spark's again, exactly."""
    values = [(["a", "a", "b"], [1, 2, 3]), (["a", "c", "b"], [5, 7, 10]),
              (["a", "d", "c"], [11, 20, 8]), (["b", "a", "d"], [16, 4, 21]),
              (["c", "e"], [6, 25]), (["a", "e", "b"], [9, 13, 30]),
              (["d", "c"], [14, 35]), (["b", "f"], [17, 12]), (["a", "f", "e"], [19, 40, 22])]
    frames = [pd.DataFrame({"user": users, "v": pd.array(vs, dtype="int64")})
              for users, vs in values]
    reference, split, report = three_ways(
        spark, tmp_path, frames, [0] + [PAUSE_S] * 8, "user string, v long", None,
        native(Journey(), Journey.OUTPUT, "ProcessingTime", rows=False),
        f"{Journey.__module__}:Journey")

    assert sorted(reference.batches) == list(range(9))
    assert_same_batches(reference, split)
    assert split.runs == [[b] for b in range(9)]
    fired = {(b, row[0]) for b, rows in split.batches.items() for row in rows
             if row[1] == "timer"}
    assert any(b >= 6 for b, _ in fired)  # timers registered here fired on Spark
    assert report.batch_id == 5 and report.entry == "transformWithStateInPandas"


@pytest.mark.timeout(1800)
def test_an_event_time_row_query_with_a_parquet_sink_goes_to_dstl_and_back(
        spark: Any, tmp_path: Path) -> None:
    """Row-based sessions in event time into a parquet sink: list and value state, event-time
    timers, the watermark and the sink's log go back to Spark; readers of the sink's path see
    what they see after an uninterrupted PySpark run."""

    def events(*triples: tuple[str, float, int]) -> pd.DataFrame:
        return pd.DataFrame({"user": [t[0] for t in triples], "ts": [at(t[1]) for t in triples],
                             "v": pd.array([t[2] for t in triples], dtype="int64")})

    frames = [events(("a", 0, 1), ("b", 1, 2)), events(("a", 3, 3), ("c", 20, 4)),
              events(("c", 22, 5), ("d", 40, 6), ("e", 2, 7)),
              events(("d", 41, 8), ("f", 50, 9), ("a", 5, 10)),
              events(("f", 52, 11), ("g", 70, 12)), events(("g", 71, 13), ("h", 90, 14)),
              events(("b", 60, 15), ("h", 93, 16), ("i", 110, 17)),
              events(("i", 111, 18), ("j", 130, 19)), events(("j", 131, 20), ("k", 150, 21))]
    _, _, report = three_ways(
        spark, tmp_path, frames, [0] * 9, "user string, ts timestamp, v long",
        ("ts", "10 seconds"),
        native_to_files(SessionRows(), SessionRows.OUTPUT, "EventTime", rows=True),
        f"{SessionRows.__module__}:SessionRows")

    expected = file_sink_rows(spark, tmp_path / "reference" / "out")
    assert file_sink_rows(spark, tmp_path / "split" / "out") == expected
    assert expected[0] == [str(b) for b in range(9)]
    closed = [row for row in expected[1] if row[1] == "closed"]
    assert {"d", "f", "g"} <= {row[0] for row in closed}  # opened on this backend, closed later
    assert (report.entry, report.output_mode) == ("transformWithState", "Append")


@pytest.mark.timeout(900)
def test_the_exported_checkpoint_holds_the_state_with_its_expiries_and_timers(
        spark: Any, tmp_path: Path) -> None:
    """Read back through Spark's own state reader: every value, list element, map entry,
    TTL expiry and timer of the location, as this backend's reader shows them."""
    location, exported = tmp_path / "location", tmp_path / "exported"
    frames = [pd.DataFrame({"user": ["a", "b", "a"], "v": pd.array([1, 5, 3], dtype="int64")}),
              pd.DataFrame({"user": ["b", "c"], "v": pd.array([7, 10], dtype="int64")})]
    outputs: dict[int, Any] = {}
    with session_conf(spark, COMPARE_SETTINGS):
        for index, frame in enumerate(frames):
            time.sleep(PAUSE_S if index else 0)
            write_input(tmp_path / "in", index, frame)
            pyspark_dstl.install()
            try:
                query = native(Journey(), Journey.OUTPUT, "ProcessingTime", rows=False)(
                    spark.readStream.schema("user string, v long")
                    .option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in")),
                    location, lambda df, b: outputs.setdefault(b, df.collect()))
            finally:
                pyspark_dstl.uninstall()
            await_query(query)
        ours = read_state(spark, str(location)).toPandas()
        printed = io.StringIO()
        assert cli_main(["export-state", str(location), str(exported), "--processor",
                         f"{Journey.__module__}:Journey"], out=printed) == 0
    assert printed.getvalue().startswith("exported batch 1: ")

    assert journey_entries_here(ours) == journey_entries_in_spark(spark, exported, 1)


@pytest.mark.timeout(900)
def test_the_locations_left_behind_refuse_the_engine_that_no_longer_owns_them(
        spark: Any, tmp_path: Path) -> None:
    location, exported = tmp_path / "location", tmp_path / "exported"
    write_inputs(tmp_path / "in", [pd.DataFrame({"user": ["a", "b"], "page": ["x", "y"]})])

    def counts(where: Path, *, switch: bool) -> Any:
        if switch:
            pyspark_dstl.install()
        try:
            stream = (spark.readStream.schema("user string, page string")
                      .option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
                      .groupBy("user").transformWithStateInPandas(
                          RunningCountPandas(), "user string, count long", "Update", "None"))
            return (stream.writeStream.foreachBatch(lambda df, b: None)
                    .option("checkpointLocation", str(where)).trigger(once=True).start())
        finally:
            if switch:
                pyspark_dstl.uninstall()

    await_query(counts(location, switch=True))
    report = export_state(spark, str(location), str(exported), RunningCountPandas())
    assert report.batch_id == 0

    with pytest.raises(LocationMovedError) as refused:  # this backend, at start()
        counts(location, switch=True)
    assert str(refused.value).startswith(
        f"checkpoint location {str(location)!r} was moved back to Spark's operator by "
        f"export-state after batch 0: its state now lives in the Spark checkpoint")
    with pytest.raises(Exception) as spark_refused, session_conf(spark, PYSPARK_STATE_SETTINGS):
        await_query(counts(location, switch=False))
    assert "moved back to Spark's operator by export-state after batch 0" in str(
        spark_refused.value)
    printed = io.StringIO()
    assert cli_main(["rescale", str(location), "--partitions", "3"], out=printed) == 2
    with session_conf(spark, PYSPARK_STATE_SETTINGS):
        await_query(counts(exported, switch=False))  # the export resumes on PySpark
