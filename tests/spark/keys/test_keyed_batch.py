"""Grouping a partition's rows by key, and turning processor output into Arrow (no Spark)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch, Keys, renumbered_slicer
from pyspark_dstl.spark.spark_errors import OutputSchemaError, StateVariableError
from pyspark_dstl.spark.stage.output import OutputCollector

SCHEMA = pa.schema([("user", pa.string()), ("count", pa.int64())])


def test_rows_are_grouped_by_one_key_column() -> None:
    table = pa.table({"user": ["b", "a", "b", "c", "a"], "v": [1, 2, 3, 4, 5]})
    batch = KeyedBatch(table, ["user"])
    groups = {batch.keys[i]: batch.rows_of(i)["v"].tolist() for i in range(len(batch))}
    assert groups == {("b",): [1, 3], ("a",): [2, 5], ("c",): [4]}
    assert batch.counts.tolist() == [len(groups[k]) for k in batch.keys]
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2]


def test_rows_are_grouped_by_several_key_columns_including_nulls() -> None:
    table = pa.table({"a": ["x", "x", None, "x", None], "b": [1, 2, 1, 1, 1],
                      "v": [10, 20, 30, 40, 50]})
    batch = KeyedBatch(table, ["a", "b"])
    groups = {batch.keys[i]: batch.rows_of(i)["v"].tolist() for i in range(len(batch))}
    assert groups == {("x", 1): [10, 40], ("x", 2): [20], (None, 1): [30, 50]}
    assert batch.key_frame().shape == (3, 2)


def test_rows_of_a_key_are_the_rows_iloc_gives_index_included() -> None:
    table = pa.table({"user": ["b", "a", "b", "c", "a"], "v": [1.0, 2.0, 3.0, 4.0, 5.0]})
    batch = KeyedBatch(table, ["user"])
    for index in range(len(batch)):
        begin, end = int(batch.offsets[index]), int(batch.offsets[index + 1])
        pd.testing.assert_frame_equal(batch.rows_of(index), batch.frame.iloc[begin:end])


def test_rows_of_a_single_dtype_batch_are_the_rows_iloc_gives() -> None:
    table = pa.table({"user": [3, 1, 3, 2], "v": [10, 20, 30, 40]})
    batch = KeyedBatch(table, ["user"])
    for index in range(len(batch)):
        begin, end = int(batch.offsets[index]), int(batch.offsets[index + 1])
        pd.testing.assert_frame_equal(batch.rows_of(index), batch.frame.iloc[begin:end])


def test_a_key_frame_keeps_the_batch_frame_attrs() -> None:
    batch = KeyedBatch(pa.table({"user": ["b", "a"], "v": [1, 2]}), ["user"])
    batch.frame.attrs["source"] = "test"
    assert batch.rows_of(1).attrs == {"source": "test"}


def test_a_column_added_to_one_key_frame_is_not_in_the_next_key_frame() -> None:
    batch = KeyedBatch(pa.table({"user": ["b", "a", "b"], "v": [1, 2, 3]}), ["user"])
    first = batch.rows_of(0)
    with pytest.warns(pd.errors.SettingWithCopyWarning):  # as on a frame.iloc slice
        first["w"] = 1
    assert list(batch.rows_of(1).columns) == ["user", "v"]
    assert list(batch.frame.columns) == ["user", "v"]


def test_empty_partition_has_no_keys() -> None:
    batch = KeyedBatch(pa.table({"user": pa.array([], pa.string())}), ["user"])
    assert len(batch) == 0 and batch.num_rows == 0 and batch.offsets.tolist() == [0]


def test_keys_slice_keeps_their_encodings() -> None:
    keys = Keys([("a",), ("b",), ("c",)], grouping=KeyGrouping(("string",), 4096))
    assert keys[1:].encoded == keys.encoded[1:]
    assert Keys.of([["a"]])[0] == ("a",)


def test_keys_taken_by_index_keep_their_stored_bytes() -> None:
    keys = Keys([("a",), ("b",), ("c",)], [b"A", b"B", b"C"])
    taken = keys.take([2, 0])
    assert list(taken) == [("c",), ("a",)] and taken.encoded == [b"C", b"A"]


def test_keys_without_stored_bytes_or_a_grouping_are_refused_naming_the_fix() -> None:
    with pytest.raises(StateVariableError, match="KeyGrouping"):
        _ = Keys([("a",)]).encoded


def test_collector_mixes_rows_frames_and_arrow() -> None:
    collector = OutputCollector(SCHEMA, "P")
    collector.add(("a", 1))
    collector.add(pd.DataFrame({"count": [2], "user": ["b"]}))
    collector.add(pa.record_batch({"user": ["c"], "count": pa.array([3], pa.int32())}))
    collector.add(pd.DataFrame({"user": [], "count": []}))
    table = collector.finish()
    assert table.schema == SCHEMA
    assert sorted(zip(table.column("user").to_pylist(), table.column("count").to_pylist(),
                      strict=True)) == [("a", 1), ("b", 2), ("c", 3)]


def test_collector_with_nothing_gives_an_empty_table_of_the_schema() -> None:
    assert OutputCollector(SCHEMA, "P").finish().schema == SCHEMA


def test_collector_rejects_a_row_of_the_wrong_width() -> None:
    with pytest.raises(OutputSchemaError, match="row of 1 values"):
        OutputCollector(SCHEMA, "P").add(("a",))


def test_collector_rejects_frames_missing_a_column() -> None:
    collector = OutputCollector(SCHEMA, "P")
    collector.add(pd.DataFrame({"user": ["a"]}))
    with pytest.raises(OutputSchemaError, match="without column"):
        collector.finish()


def test_collector_rejects_values_of_the_wrong_type_naming_the_column_first() -> None:
    collector = OutputCollector(SCHEMA, "P")
    collector.add(("a", "not a number"))
    with pytest.raises(OutputSchemaError) as raised:
        collector.finish()
    assert str(raised.value).startswith(
        "P: output column 'count' (int64) cannot hold 'not a number' (str)")
    assert "\n" not in str(raised.value)


def test_collector_names_the_frame_column_of_the_wrong_type() -> None:
    collector = OutputCollector(SCHEMA, "P")
    collector.add(pd.DataFrame({"user": ["a"], "count": ["x"]}))
    with pytest.raises(OutputSchemaError, match=r"^P: output column 'count' \(int64\) "
                                                r"cannot hold 'x'"):
        collector.finish()


def test_collector_names_the_arrow_column_that_cannot_be_cast() -> None:
    collector = OutputCollector(SCHEMA, "P")
    with pytest.raises(OutputSchemaError, match=r"^P: output column 'count' \(string\) "
                                                r"cannot be cast to int64"):
        collector.add(pa.table({"user": ["a"], "count": ["x"]}))


def test_collector_rejects_other_objects() -> None:
    with pytest.raises(OutputSchemaError, match="yielded a dict"):
        OutputCollector(SCHEMA, "P").add({"user": "a"})


def test_a_renumbered_slice_is_the_rows_with_an_index_of_their_own() -> None:
    frame = pd.DataFrame({"user": ["a", "b", "c", "d"], "v": [1, 2, 3, 4],
                          "x": [0.5, 1.5, 2.5, 3.5]})
    rows = renumbered_slicer(frame)
    for start, stop in ((0, 1), (1, 3), (3, 4), (2, 2)):
        pd.testing.assert_frame_equal(rows(start, stop),
                                      frame.iloc[start:stop].reset_index(drop=True))


def test_renumbered_slices_do_not_share_their_index() -> None:
    rows = renumbered_slicer(pd.DataFrame({"v": [1, 2, 3]}))
    first, second = rows(0, 1), rows(1, 2)
    first.index.name = "renamed"
    assert second.index.name is None and first.index is not second.index
