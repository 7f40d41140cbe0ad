"""The msgpack encodings of grouping keys and state values (no Spark needed)."""

from __future__ import annotations

import datetime
import threading

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyspark_dstl.spark.codec.values import (
    decode_elements,
    decode_key,
    decode_user_key,
    decode_value,
    decode_value_with_expiry,
    encode_elements,
    encode_key,
    encode_user_key,
    encode_value,
    ext_data,
    pack_ext,
    pack_key,
    pack_plain,
    split_map_key,
)
from pyspark_dstl.spark.spark_errors import StateDecodingError, StateEncodingError

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.floats(allow_nan=False), st.text(), st.binary())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=12)
keys = st.lists(st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                          st.text(max_size=8), st.binary(max_size=8)), min_size=1, max_size=3)


@given(values)
def test_values_round_trip(value: object) -> None:
    assert decode_value(encode_value(value, None, "v"), 0, "v") == (True, value)


@given(keys, keys)
def test_distinct_keys_never_prefix_each_other(a: list[object], b: list[object]) -> None:
    ka, kb = encode_key(a, 300), encode_key(b, 300)
    if ka != kb:
        assert not kb.startswith(ka)
    assert decode_key(ka) == tuple(a)


@given(values)
def test_a_value_is_stored_as_its_msgpack_bytes(value: object) -> None:
    assert encode_value(value, None, "v") == msgpack.packb(value, use_bin_type=True)


def test_a_value_that_fails_to_encode_leaves_nothing_in_the_next_value() -> None:
    with pytest.raises(StateEncodingError):
        encode_value(["a" * 100, datetime.date(2024, 1, 1)], None, "v")
    assert encode_value(5, None, "v") == b"\x05"


def test_threads_encoding_at_once_each_get_their_own_values_bytes() -> None:
    results: dict[int, set[bytes]] = {}

    def encode(number: int) -> None:  # numpy scalars call back into Python while packing
        value = [np.int64(number)] * 50 + ["x" * number]
        results[number] = {encode_value(value, None, "v") for _ in range(2_000)}

    threads = [threading.Thread(target=encode, args=(n,)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: {msgpack.packb([n] * 50 + ["x" * n])} for n in range(1, 5)}


def test_value_with_ttl_is_alive_until_its_expiry() -> None:
    raw = encode_value({"n": 1}, 1_000, "v")
    assert decode_value(raw, 999, "v") == (True, {"n": 1})
    assert decode_value(raw, 1_000, "v") == (False, {"n": 1})
    assert decode_value_with_expiry(raw, "v") == ({"n": 1}, 1_000)


def test_tuples_are_stored_as_lists() -> None:
    assert decode_value(encode_value((1, "a"), None, "v"), 0, "v") == (True, [1, "a"])


def test_numpy_scalars_are_stored_as_python_scalars() -> None:
    raw = encode_value([np.int64(7), np.float32(0.5), np.bool_(True)], None, "v")
    assert decode_value(raw, 0, "v") == (True, [7, 0.5, True])


def test_unsupported_value_names_the_state_variable() -> None:
    with pytest.raises(StateEncodingError, match="state last_seen"):
        encode_value(datetime.datetime(2024, 1, 1), None, "last_seen")


def test_unsupported_key_type_is_refused() -> None:
    with pytest.raises(StateEncodingError, match="grouping key"):
        encode_key([datetime.time(12, 30)], 0)


def test_timestamp_and_date_keys_round_trip_whatever_the_zone() -> None:
    aware = datetime.datetime(2026, 1, 1, 9, 0, tzinfo=datetime.UTC)
    key = (aware, datetime.date(2026, 1, 2))
    assert decode_key(encode_key(key, 1)) == key
    assert encode_key([aware.replace(tzinfo=None)], 1) == encode_key([aware], 1)  # naive: UTC


def test_list_elements_keep_their_own_expiry() -> None:
    raw = encode_elements([1, 2], 100, "l") + encode_elements([3], 200, "l") + \
        encode_elements([4], None, "l")
    assert decode_elements(raw, 50, "l") == ([1, 2, 3, 4], False)
    assert decode_elements(raw, 150, "l") == ([3, 4], True)


def test_map_key_splits_into_grouping_key_and_user_key() -> None:
    stored = encode_key(["u1", 3], 4095) + encode_user_key(("page", 7), "m")
    assert split_map_key(stored, "m") == (("u1", 3), ("page", 7))


def test_a_stored_key_is_its_group_then_its_msgpack_array() -> None:
    assert encode_key(["u1", 3], 258) == b"\x01\x02" + pack_key(["u1", 3])


def test_keys_stored_before_key_groups_decode_with_grouped_false() -> None:
    assert decode_key(pack_key(["u1", 3]), grouped=False) == ("u1", 3)
    old_map_key = pack_key(["u1", 3]) + encode_user_key("x", "m")
    assert split_map_key(old_map_key, "m", grouped=False) == (("u1", 3), "x")
    with pytest.raises(StateDecodingError, match="grouped=False"):
        decode_key(b"\x91", "k")
    assert decode_user_key(encode_user_key("x", "m"), "m") == "x"


def test_corrupt_value_names_the_state_variable() -> None:
    with pytest.raises(StateDecodingError, match="state counts"):
        decode_value(b"\xc1", 0, "counts")


@pytest.mark.parametrize("size", [1, 2, 3, 4, 8, 16, 17, 255, 256, 65535, 65536])
def test_an_extension_value_is_packed_as_msgpack_packs_it(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    packed = pack_ext(4, data)
    assert packed == msgpack.packb(msgpack.ExtType(4, data))
    assert ext_data(packed, 4) == data


def test_extension_data_is_found_only_for_a_whole_value_of_its_type() -> None:
    packed = pack_ext(4, b"abc")
    assert ext_data(packed, 1) is None  # another type
    assert ext_data(packed + b"\x00", 4) is None  # more than one value
    assert ext_data(packed[:-1], 4) is None  # cut short
    assert ext_data(msgpack.packb([1, 2]), 4) is None  # not an extension value
    assert ext_data(b"", 4) is None and ext_data(b"\xc7", 4) is None


@given(values)
def test_plain_values_pack_as_packb_packs_them(value: object) -> None:
    assert pack_plain(value) == msgpack.packb(value, use_bin_type=True)
