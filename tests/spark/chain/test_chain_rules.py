"""What a chain of stateful steps may be, with Spark's rules: refused where it is written or
where the query starts, in Spark's words where Spark refuses the same, naming the step and the
fix otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from pyspark_dstl import (
    ChainedStepError,
    ConfigError,
    DropInUsageError,
    LateOutputRowError,
    StatefulTaskError,
    StateSchemaError,
)
from tests.support.chain_compare import INPUT_SCHEMA, ChainScenario, run_chain
from tests.support.chain_processors import RELAY_SCHEMA, Backdated, Relay, RelayWithCloser

pytestmark = pytest.mark.spark


def source(spark: Any, directory: Path, watermark: bool = True) -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    df = spark.readStream.format("json").schema(INPUT_SCHEMA).load(str(directory))
    return df.withWatermark("ts", "10 seconds") if watermark else df


def relayed(dropin: Any, tmp_path: Path, event_time: str = "at") -> Any:
    return source(dropin, tmp_path / "in").groupBy("k").transformWithStateInPandas(
        Relay(), RELAY_SCHEMA, "Append", "EventTime", eventTimeColumnName=event_time)


def start(frame: Any, tmp_path: Path, mode: str) -> Any:
    return (frame.writeStream.outputMode(mode).foreachBatch(lambda df, batch: None)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).start())


def test_an_append_aggregation_without_event_time_in_its_keys_is_refused_at_start(
        dropin: Any, tmp_path: Path) -> None:
    counts = relayed(dropin, tmp_path).groupBy("k").count()
    with pytest.raises(ChainedStepError, match=r"Invalid streaming output mode: append\. "
                                               r"This output mode is not supported for "
                                               r"streaming aggregations without watermark"):
        start(counts, tmp_path, "append")


def test_a_session_window_in_update_mode_is_refused_at_start(dropin: Any,
                                                             tmp_path: Path) -> None:
    sessions = relayed(dropin, tmp_path).groupBy("k", F.session_window("at", "5 seconds")).count()
    with pytest.raises(ChainedStepError, match=r"Invalid streaming output mode: update\. This "
                                               r"output mode is not supported for session "
                                               r"window"):
        start(sessions, tmp_path, "update")


def test_complete_mode_without_an_aggregation_is_refused_by_name(dropin: Any,
                                                                 tmp_path: Path) -> None:
    deduplicated = relayed(dropin, tmp_path).dropDuplicates(["k"])
    with pytest.raises(DropInUsageError, match=r"^outputMode\('complete'\)"):
        deduplicated.writeStream.outputMode("complete")


def test_an_aggregation_in_update_mode_followed_by_a_stateful_step_is_refused(
        dropin: Any, tmp_path: Path) -> None:
    chain = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds")).count() \
        .dropDuplicates(["count"])
    with pytest.raises(ChainedStepError, match=r"^dropDuplicates\(\['count'\]\) after "
                                               r"groupBy\(window"):
        start(chain, tmp_path, "update")


def test_approx_count_distinct_is_refused_by_name_with_the_exact_way(dropin: Any,
                                                                     tmp_path: Path) -> None:
    grouped = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds"))
    with pytest.raises(ChainedStepError, match=r"approx_count_distinct is not supported .*"
                                               r"\.dropDuplicates"):
        grouped.agg(F.approx_count_distinct("k"))


def test_a_distinct_aggregate_is_refused_in_sparks_words(dropin: Any, tmp_path: Path) -> None:
    grouped = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds"))
    with pytest.raises(ChainedStepError, match=r"Distinct aggregations are not supported on "
                                               r"streaming DataFrames"):
        grouped.agg(F.countDistinct("k"))


def test_an_unsupported_aggregate_function_is_refused_naming_the_supported_ones(
        dropin: Any, tmp_path: Path) -> None:
    grouped = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds"))
    with pytest.raises(ChainedStepError, match=r"'collect_set' is not supported .*supported: "
                                               r"count, sum, avg"):
        grouped.agg(F.collect_set("k"))


def test_an_expression_over_aggregates_is_refused_with_the_stateless_fix(
        dropin: Any, tmp_path: Path) -> None:
    grouped = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds"))
    with pytest.raises(ChainedStepError, match=r"computes over aggregates.*withColumn"):
        grouped.agg((F.sum("v") + 1).alias("more"))


def test_an_unknown_grouping_column_fails_at_the_call_as_in_spark(dropin: Any,
                                                                  tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):
        relayed(dropin, tmp_path).groupBy("no_such_column").count()


def test_a_watermark_defined_again_before_a_chained_step_is_refused(dropin: Any,
                                                                    tmp_path: Path) -> None:
    again = relayed(dropin, tmp_path).withWatermark("at", "5 seconds")
    with pytest.raises(ChainedStepError, match=r"Redefining watermark is disallowed"):
        again.groupBy(F.window("at", "10 seconds")).count()


def test_drop_duplicates_within_watermark_needs_the_event_time_column(dropin: Any,
                                                                      tmp_path: Path) -> None:
    plain = source(dropin, tmp_path / "in").groupBy("k").transformWithStateInPandas(
        Relay(), RELAY_SCHEMA, "Append", "EventTime")
    with pytest.raises(ChainedStepError, match=r"dropDuplicatesWithinWatermark needs a "
                                               r"watermark .*eventTimeColumnName"):
        plain.dropDuplicatesWithinWatermark(["k"])


def test_a_session_window_without_other_keys_is_refused_as_in_spark(dropin: Any,
                                                                    tmp_path: Path) -> None:
    with pytest.raises(ChainedStepError, match=r"Global aggregation with session window"):
        relayed(dropin, tmp_path).groupBy(F.session_window("at", "5 seconds")).count()


def test_an_event_time_column_without_a_watermark_is_refused_as_in_spark(
        dropin: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"CANNOT_ASSIGN_EVENT_TIME_COLUMN_WITHOUT_WATERMARK"):
        source(dropin, tmp_path / "in", watermark=False).groupBy("k") \
            .transformWithStateInPandas(Relay(), RELAY_SCHEMA, "Append", "None",
                                        eventTimeColumnName="at")


def test_a_row_emitted_before_the_watermark_for_late_events_fails_the_batch(
        spark: Any, tmp_path: Path) -> None:
    scenario = ChainScenario("backdated", Backdated, lambda first: first.groupBy(
        F.window("at", "10 seconds")).count(), restart_after=None)
    with pytest.raises(Exception) as failure:
        run_chain(spark, scenario, "dropin", tmp_path)
    error = failure.value
    assert isinstance(error, StatefulTaskError | LateOutputRowError) or \
        "LateOutputRowError" in str(error)
    assert "EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED" in str(error)


def test_a_restart_with_another_chained_step_on_the_same_checkpoint_is_refused(
        spark: Any, tmp_path: Path) -> None:
    counts = ChainScenario("counts", RelayWithCloser, lambda first: first.groupBy(
        F.window("at", "10 seconds")).count(), restart_after=None)
    run_chain(spark, counts, "dropin", tmp_path / "dropin")
    sums = ChainScenario("sums", RelayWithCloser, lambda first: first.groupBy(
        F.window("at", "10 seconds")).agg(F.sum("v")), restart_after=None)
    with pytest.raises(StateSchemaError, match=r"operator 'stateful\.1' .*holds the state of"):
        run_chain(spark, sums, "dropin", tmp_path / "dropin")


def test_two_aggregates_of_one_name_are_refused_with_the_alias_fix(dropin: Any,
                                                                   tmp_path: Path) -> None:
    grouped = relayed(dropin, tmp_path).groupBy(F.window("at", "10 seconds"))
    with pytest.raises(ChainedStepError, match=r"several columns named 'count\(1\)'.*alias"):
        grouped.agg(F.count("*"), F.count(F.lit(1)))
