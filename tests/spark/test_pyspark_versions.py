"""Every supported PySpark runs the switch and the builder; a feature a version lacks is refused
by name on that version, before anything is written (spark/pyspark_versions.py). The version
tier (scripts/run_version_tier.sh) runs this file on PySpark 4.0, 4.1 and 4.2 as well."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_dstl import PySparkVersionAttributeError, PySparkVersionError, stateful
from pyspark_dstl.spark.pyspark_versions import arrow_schema, version_of
from tests.support.compat_processors import RunningCountPandas, RunningCountRows
from tests.support.compat_runs import input_stream, keeping_sink, write_inputs
from tests.support.spark import CountProcessor
from tests.support.versions import AVAILABLE_NOW_TIMERS, ROW_API, VERSION

pytestmark = pytest.mark.version

USERS = "user string, page string"
COUNTS = "user string, count long"
FIRST = pd.DataFrame({"user": ["a", "a", "b"], "page": ["x", "y", "z"]})
SECOND = pd.DataFrame({"user": ["a", "c"], "page": ["x", "y"]})
BOTH_BATCHES = {0: [{"user": "a", "count": 2}, {"user": "b", "count": 1}],
                1: [{"user": "a", "count": 3}, {"user": "c", "count": 1}]}


def users(spark: Any, directory: Path) -> Any:
    write_inputs(directory, [FIRST, SECOND])
    return input_stream(spark, directory, USERS)


def test_versions_are_read_as_major_and_minor() -> None:
    assert version_of("4.0.5") == (4, 0)
    assert version_of("4.2.0.dev0") == (4, 2)
    with pytest.raises(PySparkVersionError, match="not a version number"):
        version_of("four")


def test_arrow_schemas_carry_the_session_time_zone_into_nested_timestamps() -> None:
    schema = StructType([
        StructField("at", TimestampType()), StructField("local", TimestampNTZType()),
        StructField("inner", StructType([StructField("at", TimestampType())])),
        StructField("times", ArrayType(TimestampType())),
        StructField("by_name", MapType(StringType(), TimestampType()))])
    zoned = pa.timestamp("us", tz="America/New_York")
    assert arrow_schema(schema, "America/New_York").types == [
        zoned, pa.timestamp("us"), pa.struct([pa.field("at", zoned)]), pa.list_(zoned),
        pa.map_(pa.string(), zoned)]


@pytest.mark.spark
def test_available_now_without_a_time_mode_runs_batch_by_batch_on_the_switch(
        dropin: Any, tmp_path: Path) -> None:
    outputs: dict[int, Any] = {}
    query = (users(dropin, tmp_path / "in").groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "None").writeStream
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
        .foreachBatch(keeping_sink(outputs)).start())
    query.awaitTermination()
    assert outputs == BOTH_BATCHES


@pytest.mark.spark
@pytest.mark.skipif(AVAILABLE_NOW_TIMERS, reason="PySpark 4.2+ runs it (tests/spark/time)")
def test_available_now_with_timers_is_refused_on_the_switch_before_anything_is_written(
        dropin: Any, tmp_path: Path) -> None:
    writer = (users(dropin, tmp_path / "in").groupBy("user").transformWithStateInPandas(
        RunningCountPandas(), COUNTS, "Update", "ProcessingTime").writeStream
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True)
        .foreachBatch(lambda df, batch_id: None))
    with pytest.raises(PySparkVersionError,
                       match=rf"^trigger\(availableNow=True\) with timeMode 'processing_time': "
                             rf"Spark {VERSION} runs .* use trigger\(processingTime="):
        writer.start()
    assert not (tmp_path / "ckpt").exists()
    assert dropin.streams.active == []


@pytest.mark.spark
@pytest.mark.skipif(AVAILABLE_NOW_TIMERS, reason="PySpark 4.2+ runs it (tests/spark/time)")
def test_available_now_with_timers_is_refused_on_the_builder_before_anything_is_written(
        spark: Any, tmp_path: Path) -> None:
    stream = (stateful(users(spark, tmp_path / "in")).group_by("user")
              .process(CountProcessor(), COUNTS, checkpoint_location=str(tmp_path / "ckpt"),
                       time_mode="processing_time"))
    with pytest.raises(PySparkVersionError, match=rf"Spark {VERSION} runs .* PySpark 4\.2\+$"):
        stream.foreach_batch(lambda df, batch_id: None).start(trigger={"availableNow": True})
    assert not (tmp_path / "ckpt").exists()
    assert spark.streams.active == []


@pytest.mark.spark
@pytest.mark.skipif(ROW_API, reason="PySpark 4.1+ has the Row API (tests/spark/switch)")
def test_the_row_api_a_pyspark_lacks_is_refused_by_name_with_the_switch_on(
        dropin: Any, tmp_path: Path) -> None:
    grouped = users(dropin, tmp_path / "in").groupBy("user")
    assert not hasattr(grouped, "transformWithState")  # as PySpark itself answers
    with pytest.raises(PySparkVersionAttributeError,
                       match=rf"^transformWithState: PySpark {VERSION} has no Row-based "
                             rf"transformWithState .* use transformWithStateInPandas"):
        grouped.transformWithState(RunningCountRows(), COUNTS, "Update", "None")


@pytest.mark.spark
def test_the_builder_runs_a_row_processor_on_every_version(spark: Any, tmp_path: Path) -> None:
    outputs: dict[int, Any] = {}
    (stateful(users(spark, tmp_path / "in")).group_by("user")
     .transformWithState(RunningCountRows(), COUNTS, "Update", "None",
                         checkpoint_location=str(tmp_path / "ckpt"))
     .foreach_batch(keeping_sink(outputs))
     .start(trigger={"availableNow": True}).awaitTermination())
    assert outputs == BOTH_BATCHES



@pytest.mark.spark
def test_python_workers_import_the_pyspark_of_the_driver(spark: Any) -> None:
    def worker_version(_: Any) -> str:
        import pyspark

        return str(pyspark.__version__)

    workers = spark.sparkContext.parallelize(range(2), 2).map(worker_version).collect()
    assert workers == [VERSION, VERSION]
    assert os.environ.get("DSTL_TIER_PYSPARK", VERSION) == VERSION  # the tier's own version


@pytest.mark.spark
def test_python_workers_read_pyspark_from_the_package_not_from_sparks_zip(spark: Any) -> None:
    # tests/support/worker_site: a zip import compiles pyspark anew in every worker process
    def worker_file(_: Any) -> str:
        import pyspark

        return str(pyspark.__file__)

    files = spark.sparkContext.parallelize(range(2), 2).map(worker_file).collect()
    assert not any(".zip" in path for path in files), files


@pytest.mark.spark
def test_a_reused_python_worker_is_frozen_after_the_daemons_collection(spark: Any) -> None:
    # tests/support/worker_site: after a task, PySpark's daemon collects and the worker
    # freezes, whichever operator the task ran (here a plain RDD map, none of this library)
    def freeze_count(_: Any) -> tuple[int, int]:
        import gc

        return os.getpid(), gc.get_freeze_count()

    rdd = spark.sparkContext.parallelize(range(1), 1)
    first_pid, _ = rdd.map(freeze_count).collect()[0]
    later = [rdd.map(freeze_count).collect()[0] for _ in range(4)]
    assert any(pid == first_pid and frozen > 0 for pid, frozen in later), later
