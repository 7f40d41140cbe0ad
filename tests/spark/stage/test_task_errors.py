"""A failure inside a stateful task reaches the driver as one first line naming the culprit
(processor, key, batch, state partition), then the task's traceback once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.spark import stateful
from pyspark_dstl.spark.stage.failures import StatefulTaskError
from tests.support.spark import (
    COUNT_SCHEMA,
    FailOnKeyProcessor,
    WrongOutputTypeProcessor,
    file_stream,
    make_batches,
    write_batches,
)

pytestmark = pytest.mark.spark


def failure_of(spark: Any, root: Path, processor: Any) -> StatefulTaskError:
    write_batches(root / "in", make_batches(1, rows=60, keys=8, seed=41))
    query = (stateful(file_stream(spark, root / "in")).group_by("user")
             .process(processor, COUNT_SCHEMA, checkpoint_location=str(root / "ckpt"), partitions=2)
             .start(trigger={"availableNow": True}))
    with pytest.raises(StatefulTaskError) as raised:
        query.awaitTermination()
    assert query.query.exception() is not None  # Spark's own report is still there
    return raised.value


def test_processor_error_names_processor_key_batch_and_partition_first(
        spark: Any, tmp_path: Path) -> None:
    message = str(failure_of(spark, tmp_path, FailOnKeyProcessor()))
    first = message.splitlines()[0]
    assert re.fullmatch(r"FailOnKeyProcessor on key \(user='user-3'\) failed in batch 0, "
                        r"state partition [01]: ValueError: bad value for user-3", first)
    assert message.count("Traceback (most recent call last)") == 1
    assert message.count("ValueError: bad value for user-3") == 2  # line one, traceback end
    assert 'raise ValueError("bad value for user-3")' in message
    assert "py4j" not in message.lower() and "SQLSTATE" not in message


def test_wrong_output_type_names_the_column_first(spark: Any, tmp_path: Path) -> None:
    first = str(failure_of(spark, tmp_path, WrongOutputTypeProcessor())).splitlines()[0]
    assert first.startswith("WrongOutputTypeProcessor failed in batch 0, state partition ")
    assert ("OutputSchemaError: WrongOutputTypeProcessor: output column 'count' (int64) "
            "cannot hold 'not a number' (str)") in first


def test_a_batch_run_directly_raises_the_task_error_itself(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame(make_batches(1, rows=40, keys=8, seed=42)[0])
    stream = (stateful(frame).group_by("user")
              .process(FailOnKeyProcessor(), COUNT_SCHEMA,
                       checkpoint_location=str(tmp_path / "ckpt"),
                       partitions=2))
    with pytest.raises(StatefulTaskError, match=r"^FailOnKeyProcessor on key \(user='user-3'\)"):
        stream.run_batch(frame, 0)
