"""Bad input to transformWithStateInPandas / transformWithState fails on the driver, when the
call is made, with an error that names the culprit first; what can only fail in a batch
(a timer without a time mode, a value that does not fit its schema) names it too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pyspark_dstl.core.errors import ConfigError, DstlError
from pyspark_dstl.spark import StatefulStream, StateVariableError, stateful
from tests.support.compat_processors import (
    DeclaresState,
    RegistersTimer,
    RunningCountPandas,
    StoresWrongType,
)
from tests.support.compat_runs import failure_of, input_stream, write_inputs
from tests.support.spark import CountProcessor

pytestmark = pytest.mark.spark

SCHEMA = "user string, ts timestamp, n long"
OUTPUT = "user string, count long"


@dataclass
class Events:
    """A streaming DataFrame over one file (nothing is started on it unless a test does) and
    a checkpoint location next to it."""

    df: Any
    checkpoint: str

    def transform(self, processor: Any = None, *, df: Any = None, output: Any = OUTPUT,
                  output_mode: Any = "Update", time_mode: Any = "None", **more: Any) -> Any:
        return (stateful(self.df if df is None else df).group_by("user")
                .transformWithStateInPandas(processor or RunningCountPandas(), output,
                                            output_mode, time_mode,
                                            checkpoint_location=self.checkpoint, **more))


@pytest.fixture
def events(spark: Any, tmp_path: Path) -> Events:
    frame = pd.DataFrame({"user": ["a"], "ts": pd.to_datetime(["2024-01-01"], utc=True),
                          "n": [1]})
    write_inputs(tmp_path / "in", [frame])
    return Events(input_stream(spark, tmp_path / "in", SCHEMA), str(tmp_path / "ckpt"))


def test_a_processor_that_is_not_a_pyspark_stateful_processor_is_refused(events: Events) -> None:
    with pytest.raises(ConfigError, match=r"^statefulProcessor: CountProcessor is not a "
                                          r"subclass of pyspark.*\.process\(\.\.\.\)"):
        events.transform(CountProcessor())


@pytest.mark.parametrize("mode", ["Complete", "replace", None])
def test_an_output_mode_other_than_append_or_update_is_refused(events: Events, mode: Any) -> None:
    with pytest.raises(ConfigError, match=r"^outputMode: expected \"Append\" or \"Update\""):
        events.transform(output_mode=mode)


@pytest.mark.parametrize("mode", ["WallClock", "", None])
def test_an_unknown_time_mode_is_refused(events: Events, mode: Any) -> None:
    with pytest.raises(ConfigError, match=r"^timeMode: expected \"None\", \"ProcessingTime\""):
        events.transform(time_mode=mode)


def test_an_output_schema_that_does_not_parse_is_refused(events: Events) -> None:
    with pytest.raises(ConfigError, match=r"^outputStructType: cannot parse"):
        events.transform(output="user string, count lung")


def test_an_event_time_column_missing_from_the_output_is_refused(events: Events) -> None:
    with pytest.raises(ConfigError, match=r"^eventTimeColumnName: no column 'ts' in "
                                          r"outputStructType \(user, count\)"):
        events.transform(eventTimeColumnName="ts")


def test_an_event_time_column_that_is_not_a_timestamp_is_refused(events: Events) -> None:
    with pytest.raises(ConfigError, match=r"^eventTimeColumnName: column 'count' of "
                                          r"outputStructType has type long"):
        events.transform(eventTimeColumnName="count")


def test_a_timestamp_column_of_the_output_is_accepted_as_event_time_column(
        events: Events) -> None:
    stream = events.transform(df=events.df.withWatermark("ts", "1 minute"),
                              output="user string, count long, ts timestamp",
                              time_mode="EventTime", eventTimeColumnName="ts")
    assert isinstance(stream, StatefulStream)


def test_event_time_mode_without_a_watermark_is_refused(events: Events) -> None:
    with pytest.raises(ConfigError, match=r"^timeMode: \"EventTime\" needs a watermark on "
                                          r"the input: call df\.withWatermark"):
        events.transform(time_mode="EventTime")


def test_watermarks_on_two_columns_are_refused(events: Events) -> None:
    from pyspark.sql import functions as F

    left = events.df.withWatermark("ts", "1 minute")
    right = (events.df.select("user", F.col("ts").alias("ts2"))
             .withWatermark("ts2", "2 minutes"))
    joined = left.join(right, "user")  # a stream-stream join keeps both watermarks
    with pytest.raises(ConfigError, match=r"^withWatermark: the input has watermarks on "
                                          r"several columns \['ts', 'ts2'\]"):
        events.transform(df=joined, time_mode="EventTime")


@pytest.mark.parametrize("ttl", [0, -5, 1.5, "10s", True])
def test_an_invalid_ttl_is_refused_naming_the_state_variable(events: Events, ttl: Any) -> None:
    with pytest.raises(StateVariableError, match=r"^state tally: ttlDurationMs must be"):
        events.transform(DeclaresState("n long", ttl), time_mode="ProcessingTime")


def test_a_ttl_outside_processing_time_mode_is_refused_naming_the_time_mode(
        events: Events) -> None:
    with pytest.raises(StateVariableError, match=r"^state tally: ttlDurationMs needs timeMode="
                                                 r"\"ProcessingTime\".*timeMode=\"None\""):
        events.transform(DeclaresState("n long", 10_000))


def test_a_state_schema_that_does_not_parse_is_refused_naming_the_state_variable(
        events: Events) -> None:
    with pytest.raises(StateVariableError, match=r"^state tally: cannot parse the schema "
                                                 r"'n lung'"):
        events.transform(DeclaresState("n lung"))


def test_a_state_schema_that_is_not_a_struct_is_refused(events: Events) -> None:
    from pyspark.sql.types import LongType

    with pytest.raises(StateVariableError, match=r"^state tally: the schema must be a "
                                                 r"StructType \(fields\), got bigint"):
        events.transform(DeclaresState(LongType()))


def test_an_initial_state_that_is_not_grouped_is_refused(events: Events, spark: Any) -> None:
    initial = spark.createDataFrame(pd.DataFrame({"user": ["a"], "start": [1]}))
    with pytest.raises(ConfigError, match=r"^initialState: expected a grouped DataFrame"):
        events.transform(initialState=initial)


def test_a_timer_without_a_time_mode_fails_naming_time_mode(events: Events) -> None:
    message = failure_of(events.transform(RegistersTimer()))
    assert ("registerTimer: timers need timeMode=\"ProcessingTime\" or \"EventTime\" in "
            "transformWithStateInPandas(...); this query runs with timeMode=\"None\""
            in message)


def test_a_value_that_does_not_fit_its_schema_fails_naming_the_state_and_field(
        events: Events) -> None:
    message = failure_of(events.transform(StoresWrongType()))
    assert "state tally: field 'n' (bigint): expected an int, got 'many' (str)" in message


def test_driver_side_errors_derive_from_the_package_root(events: Events) -> None:
    with pytest.raises(DstlError):
        events.transform(DeclaresState("n long", 0), time_mode="ProcessingTime")


def test_a_pyspark_processor_given_to_process_points_to_transform_with_state(
        events: Events) -> None:
    with pytest.raises(StateVariableError, match=r"^RunningCountPandas is neither.*"
                                                 r"\.transformWithStateInPandas\(\.\.\.\)"):
        stateful(events.df).group_by("user").process(RunningCountPandas(), OUTPUT,
                                                      checkpoint_location=events.checkpoint)
