"""The aggregate functions of chained aggregations (spark/chain/aggregates.py, folds.py) follow
Spark's types and nulls, fold in arrival order, and keep their buffers through the store's
plain values; sessions merge as Spark merges them."""

from __future__ import annotations

import decimal
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from pyspark_dstl import AggregateOverflowError
from pyspark_dstl.spark.chain import aggregates
from pyspark_dstl.spark.chain.aggregates import AggregateSpec
from pyspark_dstl.spark.chain.session_windows import merged_sessions


def groups(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.int64)


def total(spec: AggregateSpec, table: pa.Table, ids: np.ndarray, n: int) -> list[object]:
    return aggregates.finish(spec, aggregates.update(spec, table, ids, n)).to_pylist()


def spec(function: str, inputs: tuple[str, ...], result: pa.DataType, **more: object
         ) -> AggregateSpec:
    return AggregateSpec("out", function, inputs, result, **more)  # type: ignore[arg-type]


def test_count_of_a_column_skips_its_nulls_and_count_of_rows_does_not() -> None:
    table = pa.table({"x": [1, None, 3, None]})
    ids = groups(0, 0, 1, 1)
    assert total(spec("count", ("x",), pa.int64()), table, ids, 2) == [1, 1]
    assert total(spec("count", (), pa.int64()), table, ids, 2) == [2, 2]


def test_count_of_several_columns_counts_rows_where_all_are_set() -> None:
    table = pa.table({"x": [1, None, 3], "y": [1, 2, None]})
    assert total(spec("count", ("x", "y"), pa.int64()), table, groups(0, 0, 0), 1) == [1]


def test_a_group_without_rows_counts_zero() -> None:
    table = pa.table({"x": [1]})
    assert total(spec("count", ("x",), pa.int64()), table, groups(1), 2) == [0, 1]


def test_a_sum_of_only_nulls_is_null_as_in_spark() -> None:
    table = pa.table({"x": pa.array([None, None, 5], pa.int64())})
    assert total(spec("sum", ("x",), pa.int64()), table, groups(0, 0, 1), 2) == [None, 5]


def test_a_sum_past_the_range_of_bigint_fails_naming_the_aggregate() -> None:
    table = pa.table({"x": pa.array([2 ** 62, 2 ** 62], pa.int64())})
    with pytest.raises(AggregateOverflowError, match=r"^sum\(x\) as 'out'"):
        total(spec("sum", ("x",), pa.int64()), table, groups(0, 0), 1)


def test_a_sum_of_decimals_keeps_the_wider_result_type() -> None:
    kind = pa.decimal128(20, 2)
    table = pa.table({"x": pa.array([decimal.Decimal("1.25"), decimal.Decimal("2.50")], kind)})
    result = aggregates.finish(spec("sum", ("x",), kind),
                               aggregates.update(spec("sum", ("x",), kind), table,
                                                 groups(0, 0), 1))
    assert result.type == kind and result.to_pylist() == [decimal.Decimal("3.75")]


def test_an_average_is_a_double_and_null_without_values() -> None:
    table = pa.table({"x": pa.array([1.0, 2.0, None], pa.float64())})
    mean = spec("avg", ("x",), pa.float64(), sum_type=pa.float64())
    assert total(mean, table, groups(0, 0, 1), 2) == [1.5, None]


def test_an_average_of_decimals_rounds_half_up_to_its_scale() -> None:
    table = pa.table({"x": pa.array([decimal.Decimal("1"), decimal.Decimal("0"),
                                     decimal.Decimal("0")], pa.decimal128(12, 0))})
    mean = spec("avg", ("x",), pa.decimal128(14, 4), sum_type=pa.decimal128(12, 0))
    assert total(mean, table, groups(0, 0, 0), 1) == [decimal.Decimal("0.3333")]
    table = pa.table({"x": pa.array([decimal.Decimal("2"), decimal.Decimal("0"),
                                     decimal.Decimal("1")], pa.decimal128(12, 0))})
    assert total(mean, table, groups(0, 0, 0), 1) == [decimal.Decimal("1.0000")]


def test_min_and_max_take_strings_and_timestamps() -> None:
    stamps = pa.array([datetime(2024, 1, 2, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)],
                      pa.timestamp("us", tz="UTC"))
    table = pa.table({"s": ["b", "a"], "t": stamps})
    assert total(spec("min", ("s",), pa.string()), table, groups(0, 0), 1) == ["a"]
    assert total(spec("max", ("t",), stamps.type), table, groups(0, 0), 1) == [
        datetime(2024, 1, 2, tzinfo=UTC)]


def test_first_and_last_keep_nulls_unless_told_to_skip_them() -> None:
    table = pa.table({"x": pa.array([None, 2, 3, None], pa.int64())})
    ids = groups(0, 0, 0, 0)
    assert total(spec("first", ("x",), pa.int64()), table, ids, 1) == [None]
    assert total(spec("last", ("x",), pa.int64()), table, ids, 1) == [None]
    assert total(spec("first", ("x",), pa.int64(), ignore_nulls=True), table, ids, 1) == [2]
    assert total(spec("last", ("x",), pa.int64(), ignore_nulls=True), table, ids, 1) == [3]


def test_a_merge_keeps_arrival_order_stored_rows_first() -> None:
    first = spec("first", ("x",), pa.int64())
    last = spec("last", ("x",), pa.int64())
    listed = spec("collect_list", ("x",), pa.list_(pa.int64()))
    stored_batch = pa.table({"x": pa.array([1, 2], pa.int64())})
    new_batch = pa.table({"x": pa.array([3, None], pa.int64())})
    for function, expected in ((first, 1), (last, None), (listed, [1, 2, 3])):
        stored = aggregates.update(function, stored_batch, groups(0, 0), 1)
        fresh = aggregates.update(function, new_batch, groups(0, 0), 1)
        rows = [pa.concat_arrays([a, b]) for a, b in zip(stored, fresh, strict=True)]
        merged = aggregates.merge(function, rows, groups(0, 0), 1)
        assert aggregates.finish(function, merged).to_pylist() == [expected]


def test_a_group_that_saw_no_row_keeps_the_stored_first_value() -> None:
    first = spec("first", ("x",), pa.int64())
    stored = aggregates.update(first, pa.table({"x": pa.array([7], pa.int64())}), groups(0), 2)
    fresh = aggregates.update(first, pa.table({"x": pa.array([8], pa.int64())}), groups(1), 2)
    rows = [pa.concat_arrays([a, b]) for a, b in zip(stored, fresh, strict=True)]
    merged = aggregates.merge(first, rows, groups(0, 1, 0, 1), 2)
    assert aggregates.finish(first, merged).to_pylist() == [7, 8]


def test_collect_list_leaves_out_nulls_and_an_empty_group_gets_an_empty_list() -> None:
    listed = spec("collect_list", ("x",), pa.list_(pa.int64()))
    table = pa.table({"x": pa.array([None, 4, 5], pa.int64())})
    assert total(listed, table, groups(0, 0, 0), 2) == [[4, 5], []]


@pytest.mark.parametrize("column", [
    pa.array([datetime(2024, 5, 1, 12, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
    pa.array([decimal.Decimal("12.345"), None], pa.decimal128(30, 3)),
    pa.array([[1, 2], None], pa.list_(pa.int64())),
    pa.array([True, None]),
    pa.array(["x", None]),
], ids=["timestamp", "decimal", "list", "boolean", "string"])
def test_buffers_come_back_from_the_store_as_they_went_in(column: pa.Array) -> None:
    plain = aggregates.to_plain(column)
    assert all(not isinstance(value, decimal.Decimal | datetime) for value in plain)
    assert aggregates.from_plain(plain, column.type).equals(column)


def test_touching_sessions_merge_and_a_gap_or_another_key_starts_a_new_one() -> None:
    keys = groups(0, 0, 0, 0, 1)
    starts = np.array([1, 3, 8, 20, 21], dtype=np.int64)
    ends = np.array([6, 8, 13, 25, 26], dtype=np.int64)
    numbers, firsts = merged_sessions(keys, starts, ends)
    assert numbers.tolist() == [0, 0, 0, 1, 2]  # 8 starts where [3, 8) ends: one session
    assert firsts.tolist() == [0, 3, 4]


def test_a_long_session_absorbs_later_rows_inside_it() -> None:
    numbers, _ = merged_sessions(groups(0, 0, 0), np.array([0, 2, 5], dtype=np.int64),
                                 np.array([10, 4, 7], dtype=np.int64))
    assert numbers.tolist() == [0, 0, 0]  # 5 starts before 10, the end so far
