"""Grouping keys encoded from Arrow columns at once are byte for byte the per-key encoding
(key group, then the msgpack array)."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_dstl.spark.codec.values import encode_key
from pyspark_dstl.spark.keys.key_columns import encode_key_columns
from pyspark_dstl.spark.keys.key_grouping import GROUP_COLUMN, KeyGrouping
from pyspark_dstl.spark.keys.keyed_batch import KeyedBatch
from pyspark_dstl.spark.keys.spark_hash import spark_hash

INT_BOUNDARIES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
                  -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63),
                  None]
STR_LENGTHS = [0, 1, 31, 32, 255, 256, 65535, 65536]


def groups_for(columns: list[pa.Array]) -> np.ndarray:
    """Arbitrary key groups covering both bytes of the stored group."""
    return (np.arange(len(columns[0]), dtype=np.int64) * 997 + 4095) % 4096


def per_key(columns: list[pa.Array]) -> list[bytes]:
    keys = zip(*(c.to_pylist() for c in columns), strict=True)
    return [encode_key(key, int(group))
            for key, group in zip(keys, groups_for(columns), strict=True)]


def by_columns(columns: list[pa.Array]) -> list[bytes] | None:
    return encode_key_columns(columns, groups_for(columns))


def test_integers_take_msgpack_smallest_form_at_every_boundary() -> None:
    column = pa.array(INT_BOUNDARIES, pa.int64())
    assert by_columns([column]) == per_key([column])


@pytest.mark.parametrize("kind", [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(),
                                  pa.uint32()])
def test_narrow_integer_columns_encode_like_python_ints(kind: pa.DataType) -> None:
    info_max = {pa.int8(): 127, pa.int16(): 32767, pa.int32(): 2**31 - 1, pa.uint8(): 255,
                pa.uint16(): 65535, pa.uint32(): 2**32 - 1}[kind]
    low = 0 if pa.types.is_unsigned_integer(kind) else -info_max - 1
    column = pa.array([low, 0, 1, info_max, None], kind)
    assert by_columns([column]) == per_key([column])


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_strings_take_every_msgpack_str_form(kind: pa.DataType) -> None:
    column = pa.array(["é" * (n // 2) + "x" * (n % 2) for n in STR_LENGTHS] + [None], kind)
    assert by_columns([column]) == per_key([column])


def test_several_columns_with_nulls_make_one_array_per_row() -> None:
    columns = [pa.array(["a", None, "ü" * 40]), pa.array([None, 7, -300], pa.int64()),
               pa.array([True, False, None])]
    assert by_columns(columns) == per_key(columns)


def test_chunked_columns_encode_like_their_combined_chunks() -> None:
    column = pa.chunked_array([["a", "b"], ["c"]])
    assert encode_key_columns([column], groups_for([column.combine_chunks()])) == \
        per_key([column.combine_chunks()])


@given(st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=40)),
                          st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
                min_size=1, max_size=30))
def test_any_strings_and_integers_encode_like_per_key(rows: list[tuple[object, object]]) -> None:
    columns = [pa.array([r[0] for r in rows], pa.string()),
               pa.array([r[1] for r in rows], pa.int64())]
    assert by_columns(columns) == per_key(columns)


@pytest.mark.parametrize("column", [
    pa.array([1.5]), pa.array([b"x"]), pa.array([2**64 - 1], pa.uint64()),
    pa.array([datetime.date(2024, 1, 1)]),
    pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us", "UTC")),
])
def test_other_key_types_are_left_to_the_per_key_encoding(column: pa.Array) -> None:
    assert by_columns([pa.array(["a"]), column]) is None


def test_a_keyed_batch_hands_out_the_per_key_bytes_of_its_keys() -> None:
    table = pa.table({"user": ["b", "a", "b", None], "n": pa.array([1, 2, 1, 3], pa.int32()),
                      GROUP_COLUMN: pa.array([4000, 9, 4000, 300], pa.int32()),
                      "v": [1.0, 2.0, 3.0, 4.0]})
    batch = KeyedBatch(table, ("user", "n"))
    groups = {("b", 1): 4000, ("a", 2): 9, (None, 3): 300}
    assert batch.keys.encoded == [encode_key(key, groups[key]) for key in batch.keys]


def test_a_keyed_batch_with_a_float_key_falls_back_to_per_key_encoding() -> None:
    table = pa.table({"score": [1.5, 1.5, 2.5], GROUP_COLUMN: pa.array([7, 7, 258], pa.int32()),
                      "v": [1, 2, 3]})
    batch = KeyedBatch(table, ("score",))
    assert batch.keys.encoded == [encode_key((1.5,), 7), encode_key((2.5,), 258)]


def test_a_keyed_batch_hides_the_group_column_from_user_code() -> None:
    table = pa.table({"user": ["a"], GROUP_COLUMN: pa.array([1], pa.int32()), "v": [1]})
    batch = KeyedBatch(table, ("user",))
    assert batch.table.column_names == ["user", "v"]
    assert list(batch.frame.columns) == ["user", "v"]


def test_a_keyed_batch_without_the_group_column_groups_by_its_key_grouping() -> None:
    grouping = KeyGrouping(("string", "bigint"), 4096)
    table = pa.table({"user": ["b", "a", "b"], "n": [1, 2, 1]})
    batch = KeyedBatch(table, ("user", "n"), grouping)
    assert batch.keys.encoded == grouping.encode(list(batch.keys))
    assert batch.keys.encoded[0][:2] == (spark_hash(["b", 1], ["string", "bigint"])
                                          % 4096).to_bytes(2, "big")
