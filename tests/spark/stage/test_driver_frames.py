"""A stage output the driver holds (collected, or small enough to come inline) becomes the
sink's DataFrame read from its Arrow batches by tasks, never a LocalRelation decoded on the
driver, whatever the session's Arrow settings; the session's settings are as before after."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from pyspark_dstl.spark.session import ARROW_RECORDS, session_settings
from pyspark_dstl.spark.stage.output_files import (
    LOCAL_RELATION_THRESHOLD,
    driver_arrow_frame,
)
from tests.support.spark import COUNT_SCHEMA, count_table

pytestmark = pytest.mark.spark

def plan_of(frame: Any) -> str:
    return str(frame._jdf.queryExecution().optimizedPlan().toString())


def test_a_driver_held_output_is_read_from_arrow_batches_not_a_local_relation(
        spark: Any) -> None:
    frame = driver_arrow_frame(spark, count_table(500), COUNT_SCHEMA)
    assert "LocalRelation" not in plan_of(frame)
    assert sorted(tuple(row) for row in frame.collect()) == sorted(
        (f"u{i}", i) for i in range(500))


def test_each_chunk_of_the_output_is_a_partition_of_the_frame(spark: Any) -> None:
    table = pa.concat_tables([count_table(40), count_table(40), count_table(40)])
    assert driver_arrow_frame(spark, table, COUNT_SCHEMA).rdd.getNumPartitions() == 3


def test_the_threshold_is_unset_again_when_the_session_had_none(spark: Any) -> None:
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD, None) is None
    driver_arrow_frame(spark, count_table(10), COUNT_SCHEMA)
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD, None) is None


def test_a_threshold_the_user_set_is_kept(spark: Any) -> None:
    with session_settings(spark, {LOCAL_RELATION_THRESHOLD: "1048576"}):
        driver_arrow_frame(spark, count_table(10), COUNT_SCHEMA)
        assert spark.conf.get(LOCAL_RELATION_THRESHOLD) == "1048576"


def test_an_empty_output_makes_an_empty_frame(spark: Any) -> None:
    frame = driver_arrow_frame(spark, count_table(0), COUNT_SCHEMA)
    assert frame.count() == 0 and frame.columns == ["user", "count"]


def test_a_session_without_a_record_limit_still_makes_the_frame(spark: Any) -> None:
    with session_settings(spark, {ARROW_RECORDS: "0"}):
        frame = driver_arrow_frame(spark, count_table(300), COUNT_SCHEMA)
        assert spark.conf.get(ARROW_RECORDS) == "0"
    assert frame.count() == 300
