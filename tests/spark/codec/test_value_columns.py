"""A batch's values as columns: byte for byte what the per-value encoding writes, read back as
the per-value decoding reads them, and anything else left to the per-value way."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_dstl.spark.codec.value_columns import decode_column, encode_column
from pyspark_dstl.spark.codec.values import encode_value

INT64 = st.integers(-(2**63), 2**63 - 1)
EDGES = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, -1, -32, -33,
         -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]


def per_value(values: list[object]) -> list[bytes]:
    return [encode_value(value, None, "s") for value in values]


@given(st.lists(INT64, min_size=1, max_size=50))
def test_integers_are_encoded_as_each_one_alone(values: list[int]) -> None:
    assert encode_column(values) == per_value(values)
    assert encode_column(np.array(values, dtype=np.int64)) == per_value(values)


def test_every_integer_form_is_the_one_msgpack_chooses() -> None:
    assert encode_column(EDGES) == [msgpack.packb(value) for value in EDGES]


@given(st.lists(st.floats(allow_nan=False), min_size=1, max_size=20))
def test_floats_are_encoded_as_each_one_alone(values: list[float]) -> None:
    assert encode_column(values) == per_value(values)


def test_booleans_are_encoded_as_each_one_alone() -> None:
    assert encode_column([True, False, True]) == per_value([True, False, True])
    assert encode_column(np.array([False, True])) == per_value([False, True])


@pytest.mark.parametrize("values", [
    [1, "a"], [1, None], [1, True], [1, 2.0], [2**64 - 1], [[1]], [], ["a", "b"],
], ids=["str", "none", "bool", "float", "beyond int64", "list", "empty", "strings"])
def test_anything_else_is_left_to_the_per_value_way(values: list[object]) -> None:
    assert encode_column(values) is None


@given(st.lists(st.one_of(st.none(), INT64), min_size=1, max_size=50))
def test_stored_integers_read_back_as_each_one_alone(values: list[int | None]) -> None:
    stored = [None if v is None else encode_value(v, None, "s") for v in values]
    decoded = decode_column(stored)
    if all(v is None for v in values):
        assert decoded is None
        return
    assert decoded is not None
    numbers, present = decoded
    assert present.tolist() == [v is not None for v in values]
    assert [n if p else None for n, p in zip(numbers.tolist(), present.tolist(),
                                              strict=True)] == values


def test_stored_floats_and_flags_read_back_as_each_one_alone() -> None:
    floats = [0.5, -1e300, float("inf")]
    numbers, _ = decode_column(per_value(floats))  # type: ignore[misc]
    assert numbers.tolist() == floats
    flags, _ = decode_column(per_value([True, False]))  # type: ignore[misc]
    assert flags.tolist() == [True, False]


@pytest.mark.parametrize("stored", [
    [encode_value(1, None, "s"), encode_value("a", None, "s")],
    [encode_value(1, 1_700_000_000_000, "s")],  # an expiry
    [encode_value(2**64 - 1, None, "s")],  # beyond int64
    [encode_value(1, None, "s"), encode_value(0.5, None, "s")],  # ints and floats
    [encode_value(1, None, "s") + b"\x00"],  # not one whole value
    [b"\xcd\x01"],  # cut short
], ids=["mixed", "expiry", "beyond int64", "ints and floats", "trailing", "short"])
def test_any_other_stored_value_is_left_to_the_per_value_way(stored: list[bytes]) -> None:
    assert decode_column(stored) is None
