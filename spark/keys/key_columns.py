"""Grouping keys' bytes built from their Arrow columns at once, not one msgpack call per key.

The bytes are exactly what `codec.encode_key` writes for the same key and key group (the group's
GROUP_WIDTH bytes, then a msgpack array of the column values in msgpack's smallest forms), so
state written either way is found either way.
Only the common key types are built here (strings, integers, booleans, nulls); for any other
column type `encode_key_columns` returns None and the caller encodes key by key.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.spark.keys.key_grouping import group_prefixes

_NIL = 0xC0
_TRUE, _FALSE = 0xC3, 0xC2
_FIXARRAY, _MAX_FIXARRAY = 0x90, 15
# (upper bound exclusive, marker byte, payload bytes) of msgpack's str forms after fixstr
_STR_FORMS = ((1 << 8, 0xD9, 1), (1 << 16, 0xDA, 2), (1 << 32, 0xDB, 4))
# msgpack's smallest forms of non-negative and negative integers beyond the fixints
_UINT_FORMS = ((1 << 8, 0xCC, 1), (1 << 16, 0xCD, 2), (1 << 32, 0xCE, 4), (None, 0xCF, 8))
_INT_FORMS = ((-(1 << 7), 0xD0, 1), (-(1 << 15), 0xD1, 2), (-(1 << 31), 0xD2, 4),
              (None, 0xD3, 8))
Fill = tuple[np.ndarray, int, np.ndarray | int]  # (rows, byte position in the row, byte(s))


def encode_key_columns(columns: Sequence[pa.Array | pa.ChunkedArray], groups: np.ndarray
                       ) -> list[bytes] | None:
    """Every row's stored grouping-key bytes (`groups[i]`: row i's key group), or None when a
    column's type is not built here."""
    if not columns or len(columns) > _MAX_FIXARRAY:
        return None
    parts: list[pa.Array] = []
    for column in columns:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        part = _encode_column(array)
        if part is None:
            return None
        parts.append(part)
    rows = len(parts[0])
    header = _binary(np.ones(rows, dtype=np.int64), [(np.arange(rows), 0, _FIXARRAY | len(parts))])
    if len(groups) != rows:
        raise ValueError(f"{len(groups)} key groups for {rows} keys")
    joined = pc.binary_join_element_wise(group_prefixes(groups), header, *parts,
                                         pa.scalar(b"", pa.large_binary()))
    keys: list[bytes] = joined.to_pylist()
    return keys


def _encode_column(array: pa.Array) -> pa.Array | None:
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _strings(array)
    if pa.types.is_integer(kind) and kind != pa.uint64():
        return _integers(array)
    if pa.types.is_boolean(kind):
        return _booleans(array)
    return None


def _valid(array: pa.Array) -> np.ndarray:
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _strings(array: pa.Array) -> pa.Array:
    """msgpack str header (or nil) + UTF-8 bytes of each value."""
    valid = _valid(array)
    lengths = np.asarray(pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False),
                         dtype=np.int64)
    widths = np.ones(len(array), dtype=np.int64)
    fills: list[Fill] = []
    fix = valid & (lengths < 32)
    fills.append((np.flatnonzero(fix), 0, 0xA0 | lengths[fix]))
    lower = 32
    for upper, marker, size in _STR_FORMS:
        rows = np.flatnonzero(valid & (lengths >= lower) & (lengths < upper))
        widths[rows] = 1 + size
        fills.extend(_marker_and_payload(rows, marker, lengths[rows], size))
        lower = upper
    fills.append((np.flatnonzero(~valid), 0, _NIL))
    header = _binary(widths, fills)
    body = array.cast(pa.large_binary()).fill_null(b"")
    return pc.binary_join_element_wise(header, body, pa.scalar(b"", pa.large_binary()))


def _integers(array: pa.Array) -> pa.Array:
    """Each value in msgpack's smallest integer form (or nil)."""
    valid = _valid(array)
    values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    widths = np.ones(len(array), dtype=np.int64)
    fills: list[Fill] = []
    fixint = valid & (values >= -32) & (values < 128)
    fills.append((np.flatnonzero(fixint), 0, values[fixint] & 0xFF))
    lower = 128
    for upper, marker, size in _UINT_FORMS:
        chosen = valid & (values >= lower)
        if upper is not None:
            chosen &= values < upper
            lower = upper
        rows = np.flatnonzero(chosen)
        widths[rows] = 1 + size
        fills.extend(_marker_and_payload(rows, marker, values[rows], size))
    upper_neg = -32
    for lower_neg, marker, size in _INT_FORMS:
        chosen = valid & (values < upper_neg)
        if lower_neg is not None:
            chosen &= values >= lower_neg
            upper_neg = lower_neg
        rows = np.flatnonzero(chosen)
        widths[rows] = 1 + size
        fills.extend(_marker_and_payload(rows, marker, values[rows], size))
    fills.append((np.flatnonzero(~valid), 0, _NIL))
    return _binary(widths, fills)


def _booleans(array: pa.Array) -> pa.Array:
    valid = _valid(array)
    values = np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.where(valid, np.where(values, _TRUE, _FALSE), _NIL)
    return _binary(np.ones(len(array), dtype=np.int64), [(np.arange(len(array)), 0, codes)])


def _marker_and_payload(rows: np.ndarray, marker: int, values: np.ndarray, size: int
                        ) -> list[Fill]:
    """The marker byte, then `values` big-endian in `size` bytes (two's complement)."""
    fills: list[Fill] = [(rows, 0, marker)]
    for index in range(size):
        fills.append((rows, 1 + index, (values >> (8 * (size - 1 - index))) & 0xFF))
    return fills


def _binary(widths: np.ndarray, fills: list[Fill]) -> pa.Array:
    """A large_binary array whose row i is widths[i] bytes, set by `fills`: (rows, position
    within the row, byte value or values) each writing one byte in every listed row."""
    offsets = np.zeros(len(widths) + 1, dtype=np.int64)
    np.cumsum(widths, out=offsets[1:])
    data = np.zeros(int(offsets[-1]), dtype=np.uint8)
    for rows, within, values in fills:
        if len(rows):
            data[offsets[rows] + within] = values
    return pa.Array.from_buffers(pa.large_binary(), len(widths),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])
