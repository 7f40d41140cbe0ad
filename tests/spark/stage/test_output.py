"""Frames a processor yields one per key are gathered column by column as they come; the table
is the one pd.concat of the same frames gives, whatever the frames hold."""

from __future__ import annotations

import datetime as dt
import gc
import weakref

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pyspark_dstl.spark.spark_errors import OutputSchemaError
from pyspark_dstl.spark.stage.output import OutputCollector

SCHEMA = pa.schema([("user", pa.string()), ("count", pa.int64()), ("score", pa.float64())])


def by_concat(frames: list[pd.DataFrame], schema: pa.Schema = SCHEMA) -> pa.Table:
    """What the frames are as one table the plain pandas way."""
    joined = pd.concat(frames, ignore_index=True)
    return pa.Table.from_pandas(joined[schema.names], schema=schema, preserve_index=False)


def collected(frames: list[pd.DataFrame], schema: pa.Schema = SCHEMA) -> pa.Table:
    collector = OutputCollector(schema, "P")
    for frame in frames:
        collector.add(frame)
    return collector.finish()


def one_row(user: str | None, count: object, score: object) -> pd.DataFrame:
    return pd.DataFrame({"user": [user], "count": [count], "score": [score]})


def test_one_row_frames_give_the_table_pd_concat_gives() -> None:
    frames = [one_row(f"u{i}", i, i / 2) for i in range(50)]
    assert collected(frames).equals(by_concat(frames))


def test_columns_in_another_order_or_with_extra_columns_are_matched_by_name() -> None:
    frames = [one_row("a", 1, 0.5),
              pd.DataFrame({"score": [1.5], "extra": ["x"], "count": [2], "user": ["b"]}),
              pd.DataFrame({"count": [3, 4], "user": ["c", "d"], "score": [2.5, 3.5]})]
    assert collected(frames).to_pylist() == [
        {"user": "a", "count": 1, "score": 0.5}, {"user": "b", "count": 2, "score": 1.5},
        {"user": "c", "count": 3, "score": 2.5}, {"user": "d", "count": 4, "score": 3.5}]


def test_nulls_and_nan_become_nulls_as_with_pandas() -> None:
    frames = [one_row(None, 1, float("nan")), one_row("b", 2, 1.0)]
    table = collected(frames)
    assert table.equals(by_concat(frames))
    assert table.column("user").null_count == 1 and table.column("score").null_count == 1


@pytest.mark.parametrize("late", [
    one_row("z", 9.0, 1.0),  # a float count after int counts: pandas widens the column
    pd.DataFrame({"user": ["z"], "count": pd.array([9], "Int64"), "score": [1.0]}),
    pd.DataFrame({"user": ["z"], "score": [1.0]}),  # a missing column is null for its rows
], ids=["other dtype", "extension dtype", "missing column"])
def test_a_frame_that_is_not_plain_leaves_the_rest_to_pd_concat(late: pd.DataFrame) -> None:
    frames = [one_row(f"u{i}", i, 0.0) for i in range(3)] + [late] + [one_row("y", 7, 2.0)]
    assert collected(frames).equals(by_concat(frames))


def test_timestamps_are_converted_as_pandas_converts_them() -> None:
    schema = pa.schema([("user", pa.string()), ("at", pa.timestamp("us", tz="UTC"))])
    frames = [pd.DataFrame({"user": [f"u{i}"], "at": [dt.datetime(2024, 1, 1, i)]})
              for i in range(3)]
    assert collected(frames, schema).equals(by_concat(frames, schema))


def test_a_value_the_column_cannot_hold_is_named_with_its_column() -> None:
    frames = [one_row("a", 1, 0.0), one_row("b", "many", 0.0)]
    with pytest.raises(OutputSchemaError, match=r"^P: output column 'count' \(int64\) "
                                                r"cannot hold 'many'"):
        collected(frames)


def test_a_value_no_frame_can_hold_is_named_with_its_column_too() -> None:
    frames = [one_row("a", "x", 0.0), one_row("b", "y", 0.0)]  # every frame the same dtype
    with pytest.raises(OutputSchemaError, match=r"^P: output column 'count' \(int64\) "
                                                r"cannot hold 'x'"):
        collected(frames)


def test_a_frame_is_let_go_once_collected() -> None:
    collector = OutputCollector(SCHEMA, "P")
    frame = one_row("a", 1, 0.0)
    alive = weakref.ref(frame)
    collector.add(frame)
    del frame
    gc.collect()
    assert alive() is None
    assert collector.finish().num_rows == 1


def test_a_collector_starts_empty_again_after_finish() -> None:
    collector = OutputCollector(SCHEMA, "P")
    collector.add(one_row("a", 1, 0.0))
    collector.finish()
    collector.add(one_row("b", 2, np.float64(1.0)))
    assert collector.finish().column("user").to_pylist() == ["b"]
