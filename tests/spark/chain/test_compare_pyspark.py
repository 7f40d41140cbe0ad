"""Chains of stateful steps give the same rows in the same batches on this backend (the
switch) as on PySpark's own operators, in one session: each kind of chained step, each output
mode, late rows dropped by the first step, rows the first step makes from timers in the very
batch a chained step reads, batches without data, and a restart in the middle
(tests/support/chain_compare.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tests.support.chain_compare import ChainScenario, compare_chain, describe
from tests.support.chain_processors import (
    TALLY_SCHEMA,
    Relay,
    RelayRows,
    RelayWithCloser,
    Tally,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def ten_seconds(column: str = "at") -> Any:
    return F.window(column, "10 seconds")


def window_aggregates(first: Any) -> Any:
    return (first.groupBy(ten_seconds())
            .agg(F.count("*").alias("rows"), F.sum("v").alias("total"), F.min("v"), F.max("v"),
                 F.avg("v").alias("mean"), F.collect_list("v").alias("vs"), F.min("at"),
                 F.max("at"))
            .withColumn("vs", F.array_sort("vs")))  # arrival order inside a batch is free


def window_count(first: Any) -> Any:
    return first.groupBy(ten_seconds()).count()


WINDOW_APPEND = ChainScenario("window_aggregates_append", RelayWithCloser, window_aggregates)
SCENARIOS = [
    ChainScenario("window_count_update", RelayWithCloser, window_count, "update"),
    ChainScenario("window_count_complete", RelayWithCloser, window_count, "complete"),
    ChainScenario("sliding_window_append", Relay, lambda first: first.groupBy(
        F.window("at", "10 seconds", "5 seconds")).agg(F.count("*"), F.sum("v"))),
    ChainScenario("session_window_append", RelayWithCloser, lambda first: first.groupBy(
        "k", F.session_window("at", "5 seconds")).agg(F.count("*"), F.max("v"))),
    ChainScenario("key_counts_update", RelayWithCloser,
                  lambda first: first.groupBy("k").agg(F.count("*"), F.sum("v")), "update"),
    ChainScenario("key_counts_complete", RelayWithCloser,
                  lambda first: first.groupBy("k").count(), "complete"),
    ChainScenario("event_time_key_append", RelayWithCloser,
                  lambda first: first.groupBy("at", "tag").count()),
    ChainScenario("first_and_last_rows_api", RelayRows, lambda first: first.groupBy(
        "k", F.window("at", "20 seconds")).agg(F.first("v"), F.last("v"), F.count("v")),
        rows_api=True),
    ChainScenario("drop_duplicates_with_event_time", RelayWithCloser,
                  lambda first: first.dropDuplicates(["k", "at"])),
    ChainScenario("drop_duplicates_of_keys", Relay, lambda first: first.dropDuplicates(["k"])),
    ChainScenario("drop_duplicates_within_watermark", Relay,
                  lambda first: first.dropDuplicatesWithinWatermark(["k"])),
    ChainScenario("second_transform_with_state", RelayWithCloser, lambda first: first.groupBy(
        "k").transformWithStateInPandas(Tally(), TALLY_SCHEMA, "Append", "EventTime")),
    ChainScenario("three_stateful_steps", RelayWithCloser, lambda first: first.groupBy(
        "k").transformWithStateInPandas(Tally(), TALLY_SCHEMA, "Append", "EventTime",
                                        eventTimeColumnName="at")
        .groupBy(ten_seconds()).count()),
]


def test_a_windowed_aggregation_after_transform_with_state_matches_pyspark(
        spark: Any, tmp_path: Path) -> None:
    expected, actual = compare_chain(spark, WINDOW_APPEND, tmp_path)
    assert any(expected.values()), "the scenario must emit windows"
    assert actual == expected, describe(expected, actual)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_chained_step_and_output_mode_matches_pyspark(spark: Any, tmp_path: Path,
                                                           scenario: ChainScenario) -> None:
    expected, actual = compare_chain(spark, scenario, tmp_path)
    assert any(expected.values()), "the scenario must emit rows"
    assert actual == expected, describe(expected, actual)
