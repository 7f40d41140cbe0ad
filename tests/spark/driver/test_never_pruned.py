"""A chained stage runs one task per state partition even when the previous step's output is
empty (Spark's optimizer would otherwise drop the stage's tasks), and only then pays for the
extra source that keeps the plan: a frame with rows is routed as it is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pyspark_dstl.backend.rescale.key_groups import KEY_GROUPS
from pyspark_dstl.spark.driver.stage_run import never_pruned, provably_empty, routed
from pyspark_dstl.spark.stage.output_files import driver_arrow_frame
from tests.support.spark import COUNT_SCHEMA, count_table

pytestmark = pytest.mark.spark

PARTITIONS = 3
TASKS_SCHEMA = "partition int"


def one_row_per_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    for _ in batches:
        pass
    context = TaskContext.get()
    yield pa.record_batch({"partition": pa.array([context.partitionId() if context else -1],
                                                 pa.int32())})


def tasks_run(frame: Any) -> list[int]:
    """The partitions whose task ran over `frame` routed as a stateful stage routes it."""
    keyed = routed(frame, ("user",), PARTITIONS, KEY_GROUPS)
    rows = keyed.mapInArrow(one_row_per_task, TASKS_SCHEMA).collect()
    return sorted(row.partition for row in rows)


def test_spark_runs_no_task_over_an_empty_output_left_as_it_is(spark: Any) -> None:
    empty = driver_arrow_frame(spark, count_table(0), COUNT_SCHEMA)
    assert provably_empty(empty)
    assert tasks_run(empty) == []


def test_an_empty_output_still_runs_a_task_in_every_partition(spark: Any) -> None:
    empty = driver_arrow_frame(spark, count_table(0), COUNT_SCHEMA)
    assert tasks_run(never_pruned(empty)) == list(range(PARTITIONS))


def test_steps_the_optimizer_folds_to_no_rows_still_run_a_task_in_every_partition(
        spark: Any) -> None:
    folded = driver_arrow_frame(spark, count_table(5), COUNT_SCHEMA).where(F.lit(False))
    assert provably_empty(folded)
    assert tasks_run(never_pruned(folded)) == list(range(PARTITIONS))


def test_an_output_with_rows_is_routed_as_it_is(spark: Any) -> None:
    frame = driver_arrow_frame(spark, count_table(5), COUNT_SCHEMA).where(F.col("count") > 100)
    assert not provably_empty(frame)
    assert never_pruned(frame) is frame
    assert tasks_run(frame) == list(range(PARTITIONS))
