"""Processors written for PySpark's transformWithStateInPandas and transformWithState run
unchanged on this backend, in real PySpark: state, keys, rows, outputs, initial state."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.spark import stateful
from tests.support.compat_processors import (
    TYPED_VALUES,
    CountFromInitialPandas,
    CountFromInitialRows,
    DropsOldState,
    EchoTimestamps,
    FrameProbe,
    KeyProbe,
    ListEditor,
    MapEditor,
    PagesPerUser,
    RowProbe,
    RunningCountPandas,
    RunningCountRows,
    TypedStateRoundTrip,
)
from tests.support.compat_runs import Outputs, all_rows, input_stream, run_to_end, write_inputs

pytestmark = pytest.mark.spark

USERS = "user string, page string"


def frames_of(*batches: list[tuple[str, str]]) -> list[pd.DataFrame]:
    return [pd.DataFrame(batch, columns=["user", "page"]) for batch in batches]


def test_running_count_in_pandas_counts_every_key_across_batches(spark: Any,
                                                                  tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "x"), ("a", "y"), ("b", "x")],
                                            [("a", "z"), ("c", "x")]))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithStateInPandas(statefulProcessor=RunningCountPandas(),
                                          outputStructType="user string, count long",
                                          outputMode="Update", timeMode="None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert outputs == {0: [{"user": "a", "count": 2}, {"user": "b", "count": 1}],
                       1: [{"user": "a", "count": 3}, {"user": "c", "count": 1}]}


def test_running_count_with_rows_counts_every_key_across_batches(spark: Any,
                                                                 tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "x"), ("a", "y"), ("b", "x")],
                                            [("a", "z"), ("c", "x")]))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithState(RunningCountRows(), "user string, count long", "Append",
                                  "None", checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert outputs == {0: [{"user": "a", "count": 2}, {"user": "b", "count": 1}],
                       1: [{"user": "a", "count": 3}, {"user": "c", "count": 1}]}


def test_list_and_map_state_keep_tuples_per_key(spark: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "x"), ("a", "y"), ("a", "x")],
                                            [("a", "x"), ("b", "z")]))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithStateInPandas(
                  PagesPerUser(), "user string, seen long, distinct long, first_visits long, "
                  "has_first boolean", "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert outputs == {
        0: [{"user": "a", "seen": 3, "distinct": 2, "first_visits": 2, "has_first": True}],
        1: [{"user": "a", "seen": 4, "distinct": 2, "first_visits": 3, "has_first": True},
            {"user": "b", "seen": 1, "distinct": 1, "first_visits": 1, "has_first": True}]}


def test_list_state_put_append_and_clear(spark: Any, tmp_path: Path) -> None:
    batches = [[("a", "append", "1"), ("a", "append", "2")], [("a", "put", "3")],
               [("a", "append", "4")], [("a", "clear", "")]]
    write_inputs(tmp_path / "in", [pd.DataFrame(b, columns=["user", "op", "item"])
                                   for b in batches])
    stream = (stateful(input_stream(spark, tmp_path / "in", "user string, op string, "
                                    "item string")).group_by("user")
              .transformWithStateInPandas(ListEditor(), "user string, items string, "
                                          "exists boolean", "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    rows = all_rows(run_to_end(stream, {}))
    assert [(r["items"], r["exists"]) for r in rows] == [
        ("1,2", True), ("3,3!", True), ("3,3!,4", True), ("", False)]


def test_map_state_with_tuple_keys_updates_removes_and_iterates(spark: Any,
                                                                tmp_path: Path) -> None:
    batches = [[("a", "x", 1), ("a", "y", 2)], [("a", "x", 5), ("a", "y", -1)],
               [("a", "x", -1)]]
    write_inputs(tmp_path / "in", [pd.DataFrame(b, columns=["user", "item", "n"])
                                   for b in batches])
    stream = (stateful(input_stream(spark, tmp_path / "in", "user string, item string, "
                                    "n long")).group_by("user")
              .transformWithStateInPandas(MapEditor(), "user string, entries string, "
                                          "values string, exists boolean", "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    rows = all_rows(run_to_end(stream, {}))
    assert [(r["entries"], r["values"], r["exists"]) for r in rows] == [
        ("x/1=1;y/1=2", "1,2", True), ("x/1=5", "5", True), ("", "", False)]


def test_typed_state_comes_back_as_the_tuples_its_schema_describes(spark: Any,
                                                                   tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "p"), ("b", "p")], [("a", "p"), ("b", "p")]))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithStateInPandas(TypedStateRoundTrip(), "user string, read string",
                                          "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert outputs[0] == []
    for row in outputs[1]:
        value = TYPED_VALUES[row["user"]]
        assert row["read"] == repr((value, [value, value], [((value[2], value[0]), value)]))


def test_pandas_frames_have_pysparks_types_and_a_fresh_index(spark: Any,
                                                              tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": ["b", "a", "b"], "n": pd.array([1, 2, 3], dtype="int32"),
                          "ratio": pd.array([0.5, 1.5, 2.5], dtype="float32"),
                          "ts": pd.to_datetime(["2024-01-01 10:00"] * 3, utc=True),
                          "day": [dt.date(2024, 1, 1)] * 3})
    write_inputs(tmp_path / "in", [frame])
    source = input_stream(spark, tmp_path / "in", "user string, n int, ratio float, "
                          "ts timestamp, day date")
    stream = (stateful(source).group_by("user")
              .transformWithStateInPandas(FrameProbe(), "dtypes string, index string, "
                                          "first string", "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    rows = run_to_end(stream, {})[0]
    assert {r["dtypes"] for r in rows} == {
        "user:object,n:int64,ratio:float64,ts:datetime64[ns],day:object"}
    assert sorted(r["index"] for r in rows) == ["[0, 1]", "[0]"]
    assert repr({"user": "a", "n": 2, "ratio": 1.5, "ts": pd.Timestamp("2024-01-01 10:00"),
                 "day": dt.date(2024, 1, 1)}) in {r["first"] for r in rows}


def test_row_processors_get_pyspark_rows(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"user": ["a"], "n": pd.array([None], dtype="Int64"),
                          "ts": pd.to_datetime(["2024-01-01 10:00"], utc=True)})
    write_inputs(tmp_path / "in", [frame])
    source = input_stream(spark, tmp_path / "in", "user string, n long, ts timestamp")
    stream = (stateful(source).group_by("user")
              .transformWithState(RowProbe(), "kind string, row string", "Update", "None",
                                  checkpoint_location=str(tmp_path / "ckpt")))
    rows = run_to_end(stream, {})[0]
    assert rows == [{"kind": "Row", "row": repr(_row(
        user="a", n=None, ts=dt.datetime(2024, 1, 1, 10, tzinfo=_zone("UTC"))))}]


def _row(**fields: Any) -> Any:
    from pyspark.sql import Row

    return Row(**fields)


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


KEYED = "user string, ts timestamp, day date"


def keyed_frames() -> list[pd.DataFrame]:
    return [pd.DataFrame({"user": ["a"], "ts": pd.to_datetime(["2024-01-01 10:00"], utc=True),
                          "day": [dt.date(2024, 1, 1)]})]


@pytest.fixture
def los_angeles(spark: Any) -> Any:
    """The session time zone set to America/Los_Angeles for one test."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def test_timestamp_and_date_keys_reach_pandas_processors_as_pyspark_passes_them(
        los_angeles: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", keyed_frames())
    stream = (stateful(input_stream(los_angeles, tmp_path / "in", KEYED)).group_by("ts", "day")
              .transformWithStateInPandas(KeyProbe(), "kind string, key string", "Update",
                                          "ProcessingTime",
                                          checkpoint_location=str(tmp_path / "ckpt")))
    rows = run_to_end(stream, {})[0]
    expected = repr((pd.Timestamp("2024-01-01 02:00"), dt.date(2024, 1, 1)))
    assert rows == [{"kind": "input", "key": expected}, {"kind": "timer", "key": expected}]


def test_timestamp_and_date_keys_reach_row_processors_as_pyspark_passes_them(
        los_angeles: Any, tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", keyed_frames())
    stream = (stateful(input_stream(los_angeles, tmp_path / "in", KEYED)).group_by("ts", "day")
              .transformWithState(KeyProbe(rows=True), "kind string, key string", "Update",
                                  "ProcessingTime", checkpoint_location=str(tmp_path / "ckpt")))
    rows = run_to_end(stream, {})[0]
    expected = repr((dt.datetime(2024, 1, 1, 2, tzinfo=_zone("America/Los_Angeles")),
                     dt.date(2024, 1, 1)))
    assert rows == [{"kind": "input", "key": expected}, {"kind": "timer", "key": expected}]


def test_naive_output_timestamps_are_read_in_the_session_time_zone(los_angeles: Any,
                                                                   tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", keyed_frames())
    instants: list[int] = []
    stream = (stateful(input_stream(los_angeles, tmp_path / "in", KEYED)).group_by("user")
              .transformWithStateInPandas(EchoTimestamps(), "user string, ts timestamp",
                                          "Update", "None",
                                          checkpoint_location=str(tmp_path / "ckpt"))
              .foreach_batch(lambda df, _: instants.extend(
                  r[0] for r in df.selectExpr("unix_millis(ts)").collect())))
    query = stream.start(trigger={"availableNow": True})
    query.awaitTermination()
    assert instants == [int(pd.Timestamp("2024-01-01 10:00", tz="UTC").value // 1_000_000)]


def test_initial_state_frames_start_the_count_before_the_first_batch(spark: Any,
                                                                     tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "x"), ("b", "x")], [("a", "y")]))
    initial = spark.createDataFrame(pd.DataFrame({"start": [10, 5, 100], "id": ["a", "a", "c"]}))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithStateInPandas(CountFromInitialPandas(), "user string, count long, "
                                          "initial string", "Update", "None",
                                          initialState=initial.groupBy("id"),
                                          checkpoint_location=str(tmp_path / "ckpt")))
    outputs = run_to_end(stream, {})
    assert outputs == {0: [{"user": "a", "count": 16, "initial": "start,id"},
                           {"user": "b", "count": 1, "initial": ""}],
                       1: [{"user": "a", "count": 17, "initial": "start,id"}]}


def test_initial_state_rows_reach_row_processors_one_at_a_time(spark: Any,
                                                               tmp_path: Path) -> None:
    write_inputs(tmp_path / "in", frames_of([("a", "x")]))
    initial = spark.createDataFrame(pd.DataFrame({"user": ["a", "a"], "start": [10, 5]}))
    stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
              .transformWithState(CountFromInitialRows(), "user string, count long, "
                                  "initial_calls long", "Update", "None",
                                  initialState=initial.groupBy("user"),
                                  checkpoint_location=str(tmp_path / "ckpt")))
    assert run_to_end(stream, {}) == {0: [{"user": "a", "count": 16, "initial_calls": 2}]}


def test_delete_if_exists_removes_the_state_variable_of_every_key(spark: Any,
                                                                  tmp_path: Path) -> None:
    def run(processor: Any, frames: list[pd.DataFrame], start: int) -> Outputs:
        write_inputs(tmp_path / "in", frames, start)
        stream = (stateful(input_stream(spark, tmp_path / "in", USERS)).group_by("user")
                  .transformWithStateInPandas(processor, "user string, existed boolean",
                                              "Update", "None",
                                              checkpoint_location=str(tmp_path / "c")))
        return run_to_end(stream, {})

    run(DropsOldState(drop=False), frames_of([("a", "x"), ("b", "x"), ("c", "x")]), 0)
    kept = run(DropsOldState(drop=False), frames_of([("a", "x")]), 1)
    dropped = run(DropsOldState(drop=True), frames_of([("b", "x"), ("c", "x")]), 2)
    assert kept == {1: [{"user": "a", "existed": True}]}
    assert dropped == {2: [{"user": "b", "existed": False}, {"user": "c", "existed": False}]}
