"""Grouping keys encoded from Arrow columns at once are byte for byte the per-key encoding."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_dstl.backend.spark.api.grouping import KeyedBatch
from pyspark_dstl.backend.spark.codec.key_columns import encode_key_columns
from pyspark_dstl.backend.spark.codec.values import encode_key

INT_BOUNDARIES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1,
                  -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63),
                  None]
STR_LENGTHS = [0, 1, 31, 32, 255, 256, 65535, 65536]


def per_key(columns: list[pa.Array]) -> list[bytes]:
    return [encode_key(key) for key in zip(*(c.to_pylist() for c in columns), strict=True)]


def test_integers_take_msgpack_smallest_form_at_every_boundary() -> None:
    column = pa.array(INT_BOUNDARIES, pa.int64())
    assert encode_key_columns([column]) == per_key([column])


@pytest.mark.parametrize("kind", [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(),
                                  pa.uint32()])
def test_narrow_integer_columns_encode_like_python_ints(kind: pa.DataType) -> None:
    info_max = {pa.int8(): 127, pa.int16(): 32767, pa.int32(): 2**31 - 1, pa.uint8(): 255,
                pa.uint16(): 65535, pa.uint32(): 2**32 - 1}[kind]
    low = 0 if pa.types.is_unsigned_integer(kind) else -info_max - 1
    column = pa.array([low, 0, 1, info_max, None], kind)
    assert encode_key_columns([column]) == per_key([column])


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_strings_take_every_msgpack_str_form(kind: pa.DataType) -> None:
    column = pa.array(["é" * (n // 2) + "x" * (n % 2) for n in STR_LENGTHS] + [None], kind)
    assert encode_key_columns([column]) == per_key([column])


def test_several_columns_with_nulls_make_one_array_per_row() -> None:
    columns = [pa.array(["a", None, "ü" * 40]), pa.array([None, 7, -300], pa.int64()),
               pa.array([True, False, None])]
    assert encode_key_columns(columns) == per_key(columns)


def test_chunked_columns_encode_like_their_combined_chunks() -> None:
    column = pa.chunked_array([["a", "b"], ["c"]])
    assert encode_key_columns([column]) == per_key([column.combine_chunks()])


@given(st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=40)),
                          st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
                min_size=1, max_size=30))
def test_any_strings_and_integers_encode_like_per_key(rows: list[tuple[object, object]]) -> None:
    columns = [pa.array([r[0] for r in rows], pa.string()),
               pa.array([r[1] for r in rows], pa.int64())]
    assert encode_key_columns(columns) == per_key(columns)


@pytest.mark.parametrize("column", [
    pa.array([1.5]), pa.array([b"x"]), pa.array([2**64 - 1], pa.uint64()),
    pa.array([datetime.date(2024, 1, 1)]),
    pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us", "UTC")),
])
def test_other_key_types_are_left_to_the_per_key_encoding(column: pa.Array) -> None:
    assert encode_key_columns([pa.array(["a"]), column]) is None


def test_a_keyed_batch_hands_out_the_per_key_bytes_of_its_keys() -> None:
    table = pa.table({"user": ["b", "a", "b", None], "n": pa.array([1, 2, 1, 3], pa.int32()),
                      "v": [1.0, 2.0, 3.0, 4.0]})
    batch = KeyedBatch(table, ("user", "n"))
    assert batch.keys.encoded == [encode_key(key) for key in batch.keys]


def test_a_keyed_batch_with_a_float_key_falls_back_to_per_key_encoding() -> None:
    table = pa.table({"score": [1.5, 1.5, 2.5], "v": [1, 2, 3]})
    batch = KeyedBatch(table, ("score",))
    assert batch.keys.encoded == [encode_key((1.5,)), encode_key((2.5,))]
