"""The columnar change payload (version 2): round trips, version 1 still read, every field
checked on decoding, and the last write per key that replay takes from the columns."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import numpy as np
import pytest

import pyspark_dstl.backend.lineage.latest as latest
from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, StoreIdError
from pyspark_dstl.backend.engines.columns import (
    MAGIC,
    PAYLOAD_VERSION,
    ColumnBlock,
    block_of,
    decode_blocks,
    decode_change_blocks,
    encode_blocks,
    encode_tables,
    sorted_puts,
)
from pyspark_dstl.backend.engines.records import (
    OP_DELETE,
    OP_PUT,
    VersionMarker,
    cf_prefix,
    encode_changes,
    encode_key,
)

MARKER = VersionMarker(7, "uid7", "uid6")
Writes = list[tuple[str, bytes, bytes | None]]


def _records(blocks: list[ColumnBlock]) -> Writes:
    return [(block.cf, key, value) for block in blocks
            for key, value in zip(block.key_list(), block.value_list(), strict=True)]


def _payload(cf: str = "default", ops: bytes = b"\x01\x02",
             key_offsets: tuple[int, ...] = (0, 1, 2), keys: bytes = b"ab",
             value_offsets: tuple[int, ...] = (0, 1, 1), values: bytes = b"v",
             count: int | None = None, blocks: int = 1, base: bytes | None = None,
             head: bytes | None = None, cf_raw: bytes | None = None,
             tail: bytes = b"") -> bytes:
    """A hand-built version-2 payload: one block (two writes unless changed), every field
    settable to a lie."""
    unique_id = b"uid7"
    if head is None:
        head = bytes((MAGIC, PAYLOAD_VERSION))
    if base is None:
        base = b"\x01" + struct.pack("<I", 4) + b"uid6"
    name = cf.encode() if cf_raw is None else cf_raw
    block = (struct.pack("<H", len(name)) + name
             + struct.pack("<I", len(ops) if count is None else count) + ops
             + struct.pack(f"<{len(key_offsets)}I", *key_offsets) + keys
             + struct.pack(f"<{len(value_offsets)}I", *value_offsets) + values)
    return (head + struct.pack("<Q", 7) + struct.pack("<I", len(unique_id)) + unique_id + base
            + struct.pack("<I", blocks) + block + tail)


# --- round trips ------------------------------------------------------------------------------

def test_tables_round_trip_with_puts_deletes_and_several_column_families() -> None:
    tables = [("default", {b"a": b"1", b"": b"", b"gone": None}),
              ("cf \u00e9", {b"\x00\xff": b"x" * 300, b"z": None})]
    marker, blocks = decode_blocks(encode_tables(MARKER, tables), "here")
    assert marker == MARKER
    assert _records(blocks) == [(cf, key, value) for cf, table in tables
                                for key, value in table.items()]


def test_a_payload_of_no_writes_holds_just_the_marker() -> None:
    first = VersionMarker(1, "uid1", None)
    assert decode_blocks(encode_tables(first, []), "here") == (first, [])


def test_a_table_promised_free_of_deletes_is_written_as_puts_only() -> None:
    payload = encode_tables(MARKER, [("a", {b"k": b"v"}), ("b", {b"d": None})], ["b"])
    blocks = decode_blocks(payload, "here")[1]
    assert [block.ops.tolist() for block in blocks] == [[OP_PUT], [OP_DELETE]]


def test_a_version_1_payload_reads_as_blocks_of_its_records_in_order() -> None:
    tables = [("default", {b"a": b"1", b"b": None}), ("other", {b"c": b"3"})]
    marker, blocks = decode_change_blocks(encode_changes(MARKER, tables), "here")
    assert marker == MARKER
    assert _records(blocks) == [("default", b"a", b"1"), ("default", b"b", None),
                                ("other", b"c", b"3")]


def test_a_version_2_payload_reads_through_the_same_entry_point() -> None:
    payload = encode_tables(MARKER, [("default", {b"a": b"1"})])
    assert payload[0] == MAGIC
    assert _records(decode_change_blocks(payload, "here")[1]) == [("default", b"a", b"1")]


# --- bad input: every field -------------------------------------------------------------------

def test_the_hand_built_payload_is_valid_as_it_stands() -> None:
    assert _records(decode_blocks(_payload(), "here")[1]) == [("default", b"a", b"v"),
                                                              ("default", b"b", None)]


BAD: dict[str, tuple[Callable[[], bytes], str]] = {
    "unknown version": (lambda: _payload(head=bytes((MAGIC, 9))), "version 9 is not known"),
    "base flag": (lambda: _payload(base=b"\x02"), "base flag is 2"),
    "unique id not utf-8": (lambda: _payload(base=b"\x01" + struct.pack("<I", 2) + b"\xff\xfe"),
                            "base unique id is not UTF-8"),
    "unique id longer than the payload": (
        lambda: _payload(base=b"\x01" + struct.pack("<I", 2**32 - 1)),
        "base unique id needs 4294967295 bytes"),
    "block count lies": (lambda: _payload(blocks=2**32 - 1), "block 1 column family length"),
    "empty column family": (lambda: _payload(cf=""), "column family name must be"),
    "column family with NUL": (lambda: _payload(cf_raw=b"a\x00b"), "column family name must"),
    "column family not utf-8": (lambda: _payload(cf_raw=b"\xff"), "is not UTF-8"),
    "unknown op": (lambda: _payload(ops=b"\x01\x07"), "record 1 has unknown op 7"),
    "count larger than the payload": (lambda: _payload(count=2**32 - 1),
                                      "count 4294967295 needs at least"),
    "count that lies by one": (lambda: _payload(count=3), "count 3 needs at least"),
    "key offsets not from 0": (lambda: _payload(key_offsets=(1, 1, 2)), "offsets start at 1"),
    "key offsets falling": (lambda: _payload(key_offsets=(0, 2, 1)), "keys offset 2 is below"),
    "key offsets past the payload": (lambda: _payload(key_offsets=(0, 1, 2**31)),
                                     "keys bytes needs 2147483648 bytes"),
    "value offsets falling": (lambda: _payload(value_offsets=(0, 1, 0)),
                              "values offset 2 is below"),
    "value offsets past the payload": (lambda: _payload(value_offsets=(0, 1, 2**32 - 1)),
                                       "values bytes needs 4294967295 bytes"),
    "a delete with a value": (lambda: _payload(value_offsets=(0, 1, 2), values=b"vw"),
                              "record 1 is a delete with a value"),
    "bytes after the last block": (lambda: _payload(tail=b"\x00"), "1 bytes after the last"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_payload_with_a_bad_field_is_refused_naming_it(name: str) -> None:
    build, message = BAD[name]
    with pytest.raises(CorruptCheckpointError, match=f"^change set 3 in 'f': .*{message}"):
        decode_change_blocks(build(), "change set 3 in 'f'")


def test_every_truncation_of_a_payload_is_refused() -> None:
    payload = encode_tables(MARKER, [("default", {b"a": b"1", b"bb": None}), ("x", {b"": b""})])
    for size in range(2, len(payload)):
        with pytest.raises(CorruptCheckpointError, match=r"^here: "):
            decode_blocks(payload[:size], "here")


def test_a_payload_without_the_magic_byte_is_not_columnar() -> None:
    with pytest.raises(CorruptCheckpointError, match="columnar magic byte"):
        decode_blocks(b"\x93\x01\x02", "here")


# --- the last write per key -------------------------------------------------------------------

def _model(blocks: list[ColumnBlock]) -> list[tuple[bytes, bytes | None]]:
    last: dict[bytes, bytes | None] = {}
    for cf, key, value in _records(blocks):
        last[encode_key(cf, key)] = value
    return sorted(last.items())


def _random_blocks(rng: random.Random, key_of: Callable[[], bytes], count: int,
                   ) -> list[ColumnBlock]:
    blocks = []
    for _ in range(count):
        writes = [(key_of(), None if rng.random() < 0.3 else rng.randbytes(rng.randrange(4)))
                  for _ in range(rng.randrange(1, 30))]
        blocks.append(block_of(rng.choice(["default", "a", "default2"]),
                               [k for k, _ in writes], [v for _, v in writes], len(writes)))
    return blocks


KEY_SHAPES: dict[str, Callable[[random.Random], bytes]] = {
    # zeros at the end and keys that are prefixes of others: padding must not make them equal
    "variable with zeros": lambda rng: bytes(rng.choice([0, 1, 255])
                                             for _ in range(rng.randrange(0, 11))),
    "fixed width": lambda rng: b"k%03d" % rng.randrange(40),
    "over a word": lambda rng: b"\x00" * rng.randrange(7, 10) + bytes([rng.randrange(3)]),
}


@pytest.mark.parametrize("shape", list(KEY_SHAPES))
@pytest.mark.parametrize("seed", range(4))
def test_latest_writes_are_each_keys_last_write_in_ascending_order(shape: str,
                                                                   seed: int) -> None:
    rng = random.Random(seed)
    blocks = _random_blocks(rng, lambda: KEY_SHAPES[shape](rng), 6)
    result = latest.latest_writes(blocks)
    assert list(zip(result.keys, result.values, strict=True)) == _model(blocks)
    assert result.deletes == sum(value is None for value in result.values)


def test_latest_writes_of_values_of_one_length_are_each_keys_last() -> None:
    rng = random.Random(4)
    blocks = []
    for _ in range(5):
        keys = [b"k%02d" % rng.randrange(30) for _ in range(25)]
        blocks.append(block_of("default", keys, [rng.randbytes(8) for _ in keys], len(keys)))
    result = latest.latest_writes(blocks)
    assert list(zip(result.keys, result.values, strict=True)) == _model(blocks)


def test_keys_too_spread_to_pad_are_sorted_by_python_with_the_same_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(9)
    blocks = _random_blocks(rng, lambda: KEY_SHAPES["variable with zeros"](rng), 6)
    blocks.append(block_of("default", [b"x" * 5000, b"y"], [b"long", None], 2))
    padded_calls: list[object] = []
    original = latest._sort_order
    monkeypatch.setattr(latest, "_sort_order",
                        lambda *args: padded_calls.append(args) or original(*args))
    result = latest.latest_writes(blocks)
    assert list(zip(result.keys, result.values, strict=True)) == _model(blocks)
    assert len(padded_calls) == 2  # the cfs "a" and "default2"; "default" went to Python


PACKING_SHAPES: dict[str, Callable[[random.Random], bytes]] = {
    # one integer per write holds these keys' varying bits, their length and the position
    "counters": lambda rng: b"k%011d" % rng.randrange(200),
    "prefixes and zeros": lambda rng: b"ab" + bytes(rng.randrange(3) for _ in
                                                     range(rng.randrange(0, 3))),
    "big-endian ids": lambda rng: (1 << 40 | rng.randrange(5000)).to_bytes(8, "big"),
    # spread over whole words: sorted word by word
    "random bytes": lambda rng: rng.randbytes(rng.randrange(9, 17)),
}


def _sorted_both_ways(shape: str, seed: int,
                      ) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    keys = [PACKING_SHAPES[shape](rng) for _ in range(300)]
    block = block_of("default", keys, [b""] * len(keys), len(keys))
    offsets = block.key_offsets.astype(np.int64)
    lengths = np.diff(offsets)
    rows = latest._padded(bytes(block.keys), offsets, lengths)
    assert rows is not None
    columns = latest._varying_columns(rows, lengths)
    expected = sorted(range(len(keys)), key=lambda i: (keys[i], i))  # stable bytewise order
    last = [i == len(keys) - 1 or keys[expected[i]] != keys[expected[i + 1]]
            for i in range(len(keys))]
    return latest._packed_order(columns, len(keys)), np.array(expected), np.array(last)


@pytest.mark.parametrize("shape", ["counters", "prefixes and zeros", "big-endian ids"])
@pytest.mark.parametrize("seed", range(3))
def test_keys_whose_varying_bits_fit_a_word_sort_as_one_integer_each_stably(shape: str,
                                                                             seed: int) -> None:
    packed, expected_order, expected_last = _sorted_both_ways(shape, seed)
    assert packed is not None
    order, last = packed
    assert order.tolist() == expected_order.tolist()
    assert last.tolist() == expected_last.tolist()


def test_keys_spread_over_whole_words_are_not_packed_and_sort_word_by_word() -> None:
    packed, _, _ = _sorted_both_ways("random bytes", 0)
    assert packed is None
    rng = random.Random(5)
    blocks = _random_blocks(rng, lambda: PACKING_SHAPES["random bytes"](rng), 4)
    blocks.append(block_of("default", [blocks[0].key_list()[0]], [b"again"], 1))
    result = latest.latest_writes(blocks)
    assert list(zip(result.keys, result.values, strict=True)) == _model(blocks)


def test_a_block_decoded_from_a_payload_feeds_latest_writes() -> None:
    payload = encode_blocks(MARKER, [block_of("default", [b"b", b"a", b"b"],
                                              [b"1", b"2", None], 3)])
    result = latest.latest_writes(decode_blocks(payload, "here")[1])
    assert (result.keys, result.values) == ([b"default\x00a", b"default\x00b"], [b"2", None])


@pytest.mark.parametrize("seed", range(4))
def test_sorted_puts_give_prefixed_keys_in_bytewise_order_with_their_values(seed: int) -> None:
    rng = random.Random(seed)
    table = {bytes(rng.choice([0, 1, 127, 128, 255]) for _ in range(3)): rng.randbytes(2)
             for _ in range(60)}
    keys, values = sorted_puts(block_of("cf", table, table.values(), len(table)),
                               list(table.values()))
    assert list(zip(keys, values, strict=True)) == sorted(
        (encode_key("cf", key), value) for key, value in table.items())


@pytest.mark.parametrize("table", [{b"a": b"1", b"bb": b"2"}, {b"a": b"1", b"b": None},
                                   {b"": b"1"}])
def test_sorted_puts_refuse_blocks_they_do_not_fit(table: dict[bytes, bytes | None]) -> None:
    with pytest.raises(ValueError, match="column family 'cf'"):
        sorted_puts(block_of("cf", table, table.values(), len(table)), [])


def test_offsets_are_little_endian_u32_after_the_ops() -> None:
    payload = encode_tables(VersionMarker(1, "u", None), [("c", {b"k": b"vv"})])
    # magic, version, u64 version, u32 + "u", no base, u32 blocks, u16 + "c", u32 count, op
    start = 2 + 8 + 4 + 1 + 1 + 4 + 2 + 1 + 4 + 1
    assert np.frombuffer(payload, "<u4", 2, start).tolist() == [0, 1]
    assert payload[start + 8:start + 9] == b"k"
    assert np.frombuffer(payload, "<u4", 2, start + 9).tolist() == [0, 2]
    assert payload[start + 17:] == b"vv"


def test_a_column_family_name_too_long_for_a_block_is_refused_before_any_write() -> None:
    with pytest.raises(StoreIdError, match="longer than 65535 bytes"):
        cf_prefix("\u00e9" * 40000)
    assert decode_blocks(encode_tables(MARKER, [("c" * 65535, {b"k": b"v"})]), "here")[1]
