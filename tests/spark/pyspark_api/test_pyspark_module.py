"""What PySpark's own transformWithState test module relies on beyond the basics, on this
backend: a deleted state variable refuses use with PySpark's error, a key's rows arrive in
Arrow-sized frames, a map key may be a bare value, late rows are dropped only in event time,
and timers start no batch when Spark runs no batches without data."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.spark import stateful
from pyspark_dstl.spark.session import session_settings
from tests.support.compat_processors import (
    BareStringMapKey,
    CountsFrames,
    MinEventTime,
    UsesDeletedState,
)
from tests.support.compat_runs import all_rows, input_stream, run_to_end, write_inputs
from tests.support.versions import needs_available_now_timers

pytestmark = pytest.mark.spark

USERS = "user string, page string"


def pages(spark: Any, directory: Path, *batches: list[tuple[str, str]]) -> Any:
    write_inputs(directory, [pd.DataFrame(b, columns=["user", "page"]) for b in batches])
    return input_stream(spark, directory, USERS)


def test_a_variable_used_after_delete_if_exists_raises_pysparks_runtime_error(
        spark: Any, tmp_path: Path) -> None:
    stream = (stateful(pages(spark, tmp_path / "in", [("a", "x")])).group_by("user")
              .transformWithStateInPandas(UsesDeletedState(), "user string, raised string",
                                          "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    rows = all_rows(run_to_end(stream, {}))
    assert rows[0]["raised"].startswith("Error checking value state exists: state variable "
                                        "'temp' was deleted")


@pytest.mark.parametrize(("key", "value", "frames"), [
    ("spark.sql.execution.arrow.maxRecordsPerBatch", "1", 3),
    ("spark.sql.execution.arrow.maxRecordsPerBatch", "2", 2),
    ("spark.sql.execution.arrow.maxRecordsPerBatch", "-1", 1),
    ("spark.sql.execution.arrow.maxBytesPerBatch", "2", 3),
])
def test_a_keys_rows_arrive_in_frames_no_larger_than_sparks_arrow_limits(
        spark: Any, tmp_path: Path, key: str, value: str, frames: int) -> None:
    with session_settings(spark, {key: value}):
        stream = (stateful(pages(spark, tmp_path / "in", [("a", "x"), ("a", "y"), ("a", "z")]))
                  .group_by("user").transformWithStateInPandas(
                      CountsFrames(), "user string, frames long", "Update", "None",
                      checkpoint_location=str(tmp_path / "ckpt")))
        assert all_rows(run_to_end(stream, {})) == [{"user": "a", "frames": frames}]


def test_a_bare_string_is_a_one_field_map_key_as_in_pyspark(spark: Any, tmp_path: Path) -> None:
    stream = (stateful(pages(spark, tmp_path / "in", [("a", "x"), ("a", "y"), ("a", "x")]))
              .group_by("user").transformWithStateInPandas(
                  BareStringMapKey(), "user string, pages long", "Update", "None",
                  checkpoint_location=str(tmp_path / "ckpt")))
    assert all_rows(run_to_end(stream, {})) == [{"user": "a", "pages": 2}]


def watermarked(spark: Any, directory: Path) -> Any:
    moments = [[("a", 20)], [("a", 4)], [("a", 2), ("a", 15)]]
    frames = [pd.DataFrame({"user": [u for u, _ in batch],
                            "ts": [dt.datetime.fromtimestamp(s, dt.UTC).replace(tzinfo=None)
                                   for _, s in batch]}) for batch in moments]
    write_inputs(directory, frames)
    return input_stream(spark, directory, "user string, ts timestamp").withWatermark(
        "ts", "10 seconds")


@pytest.mark.parametrize(("mode", "smallest"), [
    ("None", [20, 4, 2]),
    pytest.param("ProcessingTime", [20, 4, 2], marks=needs_available_now_timers),
    pytest.param("EventTime", [20, 4, 15], marks=needs_available_now_timers)])
def test_late_rows_are_dropped_only_in_event_time(spark: Any, tmp_path: Path, mode: str,
                                                  smallest: list[int]) -> None:
    with session_settings(spark, {"spark.sql.session.timeZone": "UTC"}):
        stream = (stateful(watermarked(spark, tmp_path / "in")).group_by("user")
                  .transformWithStateInPandas(MinEventTime(), "user string, smallest long",
                                              "Update", mode,
                                              checkpoint_location=str(tmp_path / "ckpt")))
        assert [r["smallest"] for r in all_rows(run_to_end(stream, {}))] == smallest


@pytest.mark.parametrize(("enabled", "sources"), [("true", 2), ("false", 1)])
def test_timers_start_batches_without_data_only_when_spark_runs_such_batches(
        spark: Any, tmp_path: Path, enabled: str, sources: int) -> None:
    from tests.support.compat_processors import RegistersTimer

    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    with session_settings(spark, {key: enabled}):
        stream = (stateful(pages(spark, tmp_path / "in", [("a", "x")])).group_by("user")
                  .transformWithStateInPandas(RegistersTimer(), "user string", "Update",
                                              "ProcessingTime",
                                              checkpoint_location=str(tmp_path / "ckpt")))
        query = stream.foreach_batch(lambda df, batch_id: None).start(
            trigger={"availableNow": True})
        query.awaitTermination()
    # with them, the query also reads the tick source that starts a batch for a due timer
    assert len(query.recentProgress[0]["sources"]) == sources


def test_an_output_struct_with_non_null_fields_reaches_the_sink(spark: Any,
                                                                tmp_path: Path) -> None:
    from tests.support.compat_processors import NESTED_NOT_NULL_OUTPUT, NestedNotNullOutput

    stream = (stateful(pages(spark, tmp_path / "in", [("a", "x"), ("a", "y")]))
              .group_by("user").transformWithState(NestedNotNullOutput(),
                                                   NESTED_NOT_NULL_OUTPUT, "Update", "None",
                                                   checkpoint_location=str(tmp_path / "ckpt")))
    rows = all_rows(run_to_end(stream, {}))
    assert [(r["user"], r["value"]["id"], r["value"]["name"]) for r in rows] == [("a", 2, "n2")]
