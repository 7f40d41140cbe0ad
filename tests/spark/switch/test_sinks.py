"""`.writeStream` on the drop-in result: Spark's writer surface, its sinks with their guarantees,
and Spark's StreamingQuery as the handle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl import DropInUsageError, DstlError
from tests.support.compat_processors import RunningCountPandas
from tests.support.compat_runs import input_stream, write_inputs
from tests.support.spark import REPO_ROOT

pytestmark = pytest.mark.spark

USERS = "user string, page string"
COUNTS = "user string, count long"
FIRST = pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]})
SECOND = pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]})
THIRD = pd.DataFrame({"user": ["b", "c", "c"], "page": ["x", "y", "z"]})


def counts_over(spark: Any, directory: Path, *frames: pd.DataFrame, start: int = 0) -> Any:
    write_inputs(directory, list(frames), start=start)
    return input_stream(spark, directory, USERS).groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")


def rows_of(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in df.collect())


def test_the_handle_is_sparks_streaming_query_listed_as_active(dropin: Any,
                                                                tmp_path: Path) -> None:
    query = (counts_over(dropin, tmp_path / "in", FIRST).writeStream.queryName("handle_probe")
             .foreachBatch(lambda df, batch_id: None).start())
    try:
        assert query.name == "handle_probe" and query.isActive
        assert query.id in [active.id for active in dropin.streams.active]
        query.processAllAvailable()
        assert query.lastProgress["batchId"] >= 0 and query.recentProgress
        assert query.status["message"]
        assert query.exception() is None
        assert query.runId
    finally:
        query.stop()
    assert query.awaitTermination(10) in (True, None) and not query.isActive


def test_the_memory_sink_fills_the_view_named_by_the_query(dropin: Any, tmp_path: Path) -> None:
    query = (counts_over(dropin, tmp_path / "in", FIRST, SECOND).writeStream.format("memory")
             .queryName("dropin_counts").outputMode("update").start())
    query.processAllAvailable()
    query.stop()
    assert rows_of(dropin.sql("SELECT * FROM dropin_counts")) == [
        ("a", 2), ("a", 3), ("b", 1), ("c", 1)]


def test_the_memory_sink_needs_a_query_name(dropin: Any, tmp_path: Path) -> None:
    with pytest.raises(DropInUsageError, match=r"queryName"):
        counts_over(dropin, tmp_path / "in", FIRST).writeStream.format("memory").start()


def test_the_console_sink_prints_each_batch(dropin: Any, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    query = counts_over(dropin, tmp_path / "in", FIRST).writeStream.format("console").start()
    query.processAllAvailable()
    query.stop()
    printed = capsys.readouterr().out
    assert "Batch: 0" in printed and "|   a|    2|" in printed


@pytest.mark.version
def test_the_parquet_sink_writes_sparks_sink_log_and_a_restart_continues_the_state(
        dropin: Any, tmp_path: Path) -> None:
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    writer = (counts_over(dropin, tmp_path / "in", FIRST, SECOND).writeStream.format("parquet")
              .option("checkpointLocation", checkpoint).outputMode("append"))
    query = writer.start(output)
    query.processAllAvailable()
    query.stop()
    write_inputs(tmp_path / "in", [THIRD], start=2)
    query = writer.start(output)
    query.processAllAvailable()
    query.stop()
    assert sorted(os.listdir(tmp_path / "out" / "_spark_metadata"))[-3:] == ["0", "1", "2"]
    assert rows_of(dropin.read.parquet(output)) == [
        ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("c", 1), ("c", 3)]
    assert (tmp_path / "ckpt" / "engine" / "commits").is_dir()  # Spark's own, under the same root


@pytest.mark.parametrize("file_format", ["json", "csv"])
def test_other_file_formats_are_read_back_whole(dropin: Any, tmp_path: Path,
                                                file_format: str) -> None:
    output = str(tmp_path / "out")
    query = (counts_over(dropin, tmp_path / "in", FIRST).writeStream.format(file_format)
             .option("checkpointLocation", str(tmp_path / "ckpt")).start(output))
    query.processAllAvailable()
    query.stop()
    read = dropin.read.schema(COUNTS).format(file_format).load(output)
    assert rows_of(read) == [("a", 2), ("b", 1)]


def test_partition_by_lays_out_the_files_by_column(dropin: Any, tmp_path: Path) -> None:
    output = tmp_path / "out"
    query = (counts_over(dropin, tmp_path / "in", FIRST, SECOND).writeStream.format("parquet")
             .partitionBy("user").option("checkpointLocation", str(tmp_path / "ckpt"))
             .start(str(output)))
    query.processAllAvailable()
    query.stop()
    assert {p.name for p in output.iterdir() if p.name.startswith("user=")} == {
        "user=a", "user=b", "user=c"}
    assert sorted((r["user"], r["count"]) for r in dropin.read.parquet(str(output)).collect()) \
        == [("a", 2), ("a", 3), ("b", 1), ("c", 1)]


def test_to_table_appends_each_batch_once_to_a_table_stored_as_files(dropin: Any,
                                                                    tmp_path: Path) -> None:
    table = "dropin_table_counts"
    dropin.sql(f"DROP TABLE IF EXISTS {table}")
    dropin.sql(f"CREATE TABLE {table} (user STRING, count BIGINT) USING parquet "
               f"LOCATION '{tmp_path / 'table'}'")
    try:
        query = (counts_over(dropin, tmp_path / "in", FIRST, SECOND).writeStream
                 .option("checkpointLocation", str(tmp_path / "ckpt")).toTable(table))
        query.processAllAvailable()
        query.stop()
        assert rows_of(dropin.table(table)) == [("a", 2), ("a", 3), ("b", 1), ("c", 1)]
        assert (tmp_path / "table" / "_spark_metadata" / "1").is_file()
    finally:
        dropin.sql(f"DROP TABLE IF EXISTS {table}")


def test_to_table_creates_a_missing_table(dropin: Any, tmp_path: Path) -> None:
    from pyspark_dstl.spark.switch.sinks import create_table, table_location

    table = "dropin_created_counts"
    dropin.sql(f"DROP TABLE IF EXISTS {table}")
    schema = counts_over(dropin, tmp_path / "in", FIRST).schema
    try:
        create_table(dropin, table, schema, "parquet", ["user"])
        provider, location = table_location(dropin, table)
        assert provider == "parquet" and location
        assert dropin.table(table).columns == ["count", "user"]  # partition columns go last
    finally:
        dropin.sql(f"DROP TABLE IF EXISTS {table}")


def test_foreach_calls_open_process_close_per_partition(dropin: Any, tmp_path: Path) -> None:
    from tests.support.compat_runs import RowFileWriter

    directory = tmp_path / "rows"
    directory.mkdir()
    query = (counts_over(dropin, tmp_path / "in", FIRST).writeStream
             .foreach(RowFileWriter(str(directory))).start())
    query.processAllAvailable()
    query.stop()
    written = sorted(tuple(json.loads(line)) for path in directory.iterdir()
                     for line in path.read_text().splitlines())
    assert written == [("a", 2), ("b", 1)]


def test_a_file_sink_without_a_checkpoint_location_gets_sparks_requirement(
        dropin: Any, tmp_path: Path) -> None:
    with pytest.raises(DropInUsageError, match=r"^checkpointLocation: the parquet sink"):
        counts_over(dropin, tmp_path / "in", FIRST).writeStream.format("parquet").start(
            str(tmp_path / "out"))


def test_complete_mode_and_a_continuous_trigger_are_refused_by_name(dropin: Any,
                                                                    tmp_path: Path) -> None:
    writer = counts_over(dropin, tmp_path / "in", FIRST).writeStream
    with pytest.raises(DropInUsageError, match=r"^outputMode\('complete'\)"):
        writer.outputMode("complete")
    with pytest.raises(DropInUsageError, match=r"^trigger\(continuous='1 second'\)"):
        writer.trigger(continuous="1 second")
    with pytest.raises(DropInUsageError, match=r"exactly one"):
        writer.trigger(processingTime="1 second", availableNow=True)


def test_a_file_sink_in_update_mode_is_refused_as_spark_refuses_it(dropin: Any,
                                                                  tmp_path: Path) -> None:
    writer = (counts_over(dropin, tmp_path / "in", FIRST).writeStream.format("parquet")
              .option("checkpointLocation", str(tmp_path / "ckpt")).outputMode("update"))
    with pytest.raises(DropInUsageError, match=r"^format\('parquet'\) with outputMode\('update'\): "
                                               r"a file sink only appends"):
        writer.start(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_url_with_one_slash_is_refused_before_anything_is_written(
        dropin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    writer = (counts_over(dropin, tmp_path / "in", FIRST).writeStream
              .option("checkpointLocation", "s3:/bucket/counts").foreachBatch(lambda d, i: None))
    with pytest.raises(DstlError, match=r"write s3://bucket/counts"):
        writer.start()
    assert not (tmp_path / "s3:").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_kill_after_the_files_and_before_the_commit_leaves_every_row_once(
        dropin: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", [FIRST, SECOND, THIRD])
    arguments = [sys.executable, "-m", "tests.support.dropin_job", str(tmp_path / "in"),
                 str(tmp_path / "ckpt"), str(tmp_path / "out")]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
                   "DSTL_KILL_POINT": "commit_log_before:2"}
    killed = subprocess.run(arguments, cwd=REPO_ROOT, env=environment, capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -9, killed.stdout + killed.stderr[-3000:]
    assert (tmp_path / "out" / "_spark_metadata" / "1").exists()  # batch 1's files are in
    environment.pop("DSTL_KILL_POINT")
    rerun = subprocess.run(arguments, cwd=REPO_ROOT, env=environment, capture_output=True,
                           text=True, timeout=600)
    assert rerun.returncode == 0 and "DONE" in rerun.stdout, rerun.stderr[-3000:]
    assert rows_of(dropin.read.parquet(str(tmp_path / "out"))) == [
        ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("c", 1), ("c", 3)]
