"""The switch: after `pyspark_dstl.install()`, PySpark's own transformWithState calls on a
streaming DataFrame run on this backend; batch DataFrames keep PySpark's operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import pyspark_dstl
from pyspark_dstl import DropInUsageError, DstlError, StatefulDataFrame
from tests.support.compat_processors import RunningCountPandas, RunningCountRows
from tests.support.compat_runs import input_stream, write_inputs
from tests.support.versions import needs_row_api

pytestmark = pytest.mark.spark

USERS = "user string, page string"
COUNTS = "user string, count long"


def users_stream(spark: Any, directory: Path) -> Any:
    write_inputs(directory, [pd.DataFrame({"user": ["a", "b"], "page": ["x", "y"]})])
    return input_stream(spark, directory, USERS)


@pytest.mark.version
def test_install_routes_a_streaming_transform_with_state_in_pandas_here(
        dropin: Any, tmp_path: Path) -> None:
    counts = users_stream(dropin, tmp_path / "in").groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")
    assert isinstance(counts, StatefulDataFrame)
    assert counts.isStreaming and counts.columns == ["user", "count"]


@pytest.mark.version
@needs_row_api
def test_install_routes_the_row_based_transform_with_state_here(dropin: Any,
                                                                tmp_path: Path) -> None:
    counts = users_stream(dropin, tmp_path / "in").groupBy("user").transformWithState(
        statefulProcessor=RunningCountRows(), outputStructType=COUNTS, outputMode="Append",
        timeMode="None")
    assert isinstance(counts, StatefulDataFrame)


@pytest.mark.version
def test_a_batch_dataframe_keeps_pysparks_own_operator(dropin: Any) -> None:
    batch = dropin.createDataFrame([("a", "x"), ("a", "y")], USERS)
    counts = batch.groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")
    assert not isinstance(counts, StatefulDataFrame)
    assert [tuple(r) for r in counts.collect()] == [("a", 2)]


@pytest.mark.version
def test_install_twice_changes_nothing_and_uninstall_restores_pyspark(spark: Any,
                                                                      tmp_path: Path) -> None:
    from pyspark.sql.group import GroupedData

    own = GroupedData.transformWithStateInPandas
    pyspark_dstl.install()
    pyspark_dstl.install()
    try:
        assert pyspark_dstl.installed()
        assert GroupedData.transformWithStateInPandas is not own
    finally:
        pyspark_dstl.uninstall()
    assert not pyspark_dstl.installed()
    assert GroupedData.transformWithStateInPandas is own
    stream = users_stream(spark, tmp_path / "in")
    assert not isinstance(stream.groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None"), StatefulDataFrame)


def test_grouping_by_a_column_object_uses_its_name(dropin: Any, tmp_path: Path) -> None:
    stream = users_stream(dropin, tmp_path / "in")
    counts = stream.groupBy(stream["user"]).transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None")
    assert counts.stateful_call.key_columns == ("user",)


def test_grouping_by_an_expression_is_refused_with_the_fix(dropin: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    stream = users_stream(dropin, tmp_path / "in")
    with pytest.raises(DropInUsageError, match=r"withColumn"):
        stream.groupBy(F.upper("user")).transformWithStateInPandas(
            RunningCountPandas(), COUNTS, "Update", "None")


@pytest.mark.version
def test_a_wrong_argument_fails_at_the_call_with_pysparks_argument_names(
        dropin: Any, tmp_path: Path) -> None:
    stream = users_stream(dropin, tmp_path / "in")
    with pytest.raises(DropInUsageError, match=r"statefulProcessor, outputStructType"):
        stream.groupBy("user").transformWithStateInPandas(RunningCountPandas(), COUNTS,
                                                          "Update", "None", nonsense=1)


def test_a_processor_class_instead_of_an_instance_is_named(dropin: Any, tmp_path: Path) -> None:
    stream = users_stream(dropin, tmp_path / "in")
    with pytest.raises(DstlError) as failure:
        stream.groupBy("user").transformWithStateInPandas(RunningCountPandas, COUNTS,
                                                          "Update", "None")
    assert "RunningCountPandas()" in str(failure.value).splitlines()[0]


def test_the_builder_names_a_trigger_given_as_a_string(spark: Any, tmp_path: Path) -> None:
    from pyspark_dstl import ConfigError, stateful
    from tests.support.spark import COUNT_SCHEMA, CountProcessor

    stream = stateful(users_stream(spark, tmp_path / "in")).group_by("user").process(
        CountProcessor(), COUNT_SCHEMA, checkpoint_location=str(tmp_path / "ckpt"))
    with pytest.raises(ConfigError, match=r"trigger='10 seconds': .*'processingTime'"):
        stream.start(trigger="10 seconds")  # type: ignore[arg-type]


def test_the_builder_names_a_batch_dataframe_given_to_start(spark: Any, tmp_path: Path) -> None:
    from pyspark_dstl import ConfigError, stateful
    from tests.support.spark import COUNT_SCHEMA, CountProcessor

    batch = spark.createDataFrame([("a", 1)], "user string, v long")
    stream = stateful(batch).group_by("user").process(CountProcessor(), COUNT_SCHEMA,
                                                       checkpoint_location=str(tmp_path / "ckpt"))
    with pytest.raises(ConfigError, match=r"batch DataFrame.*run_batch"):
        stream.start()
