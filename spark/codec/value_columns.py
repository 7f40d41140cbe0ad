"""A batch's state values as columns: msgpack integers, floats and booleans encoded and decoded
with NumPy, a column at a time, byte for byte what values.py writes and reads one at a time.

The vectorized API reads and writes the values of every key of a batch at once; a value per
key through msgpack costs a Python call or two each. Integers (64-bit), floats and booleans
without an expiry have fixed msgpack forms (the smallest integer form, as msgpack's Packer
chooses it; a float as 0xcb and eight big-endian bytes; 0xc2 / 0xc3), so a column of them is
built from NumPy arrays and split into one bytes object per key, and a batch of stored values
that all have one of these forms is read back the same way. Anything else (None among values
to write, another type, an expiry) returns None and the caller takes the per-value way, so
both ways always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# (lowest, highest, leading byte, payload width) of every integer form but the fixints
_UNSIGNED = ((0x80, 0xFF, 0xCC, 1), (0x100, 0xFFFF, 0xCD, 2), (0x10000, 0xFFFFFFFF, 0xCE, 4))
_SIGNED = ((-0x80, -0x21, 0xD0, 1), (-0x8000, -0x81, 0xD1, 2),
           (-0x80000000, -0x8001, 0xD2, 4))
_WIDTH_OF_LEAD = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_FLOAT_LEAD = 0xCB
_FALSE, _TRUE = 0xC2, 0xC3


def encode_column(values: Any) -> list[bytes] | None:
    """Each value's msgpack bytes, or None when the column is not all ints, all floats or all
    bools (NumPy arrays of those kinds, or lists of exactly those Python types)."""
    array = _as_array(values)
    if array is None:
        return None
    if array.dtype.kind == "b":
        return [b"\xc3" if flag else b"\xc2" for flag in array.tolist()]
    if array.dtype.kind == "f":
        packed = np.empty((len(array), 9), np.uint8)
        packed[:, 0] = _FLOAT_LEAD
        packed[:, 1:] = array.astype(">f8").view(np.uint8).reshape(-1, 8)
        return _split(packed.reshape(-1), np.full(len(array), 9, np.int64))
    return _encode_integers(array)


def _as_array(values: Any) -> np.ndarray | None:
    if isinstance(values, np.ndarray):
        if values.ndim != 1 or values.dtype.kind not in "biuf":
            return None
        if values.dtype.kind == "u" and values.dtype.itemsize == 8 and \
                len(values) and int(values.max()) > np.iinfo(np.int64).max:
            return None
        return values.astype(np.float64 if values.dtype.kind == "f" else
                             bool if values.dtype.kind == "b" else np.int64, copy=False)
    if not isinstance(values, Sequence) or not len(values):
        return None
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond 64 bits: msgpack's own way says what it can pack
            return None
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {bool}:
        return np.array(values, dtype=bool)
    return None


def _encode_integers(numbers: np.ndarray) -> list[bytes]:
    count = len(numbers)
    lead = np.zeros(count, np.uint8)
    width = np.zeros(count, np.int64)  # payload bytes after the leading byte
    fixed = (numbers >= -32) & (numbers <= 127)
    lead[fixed] = (numbers[fixed] & 0xFF).astype(np.uint8)
    for low, high, code, size in (*_UNSIGNED, *_SIGNED):
        chosen = (numbers >= low) & (numbers <= high)
        lead[chosen], width[chosen] = code, size
    big = numbers > 0xFFFFFFFF
    lead[big], width[big] = 0xCF, 8
    small = numbers < -0x80000000
    lead[small], width[small] = 0xD3, 8
    payload = numbers.astype(">i8").view(np.uint8).reshape(-1, 8)
    sizes = width + 1
    out = np.empty(int(sizes.sum()), np.uint8)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    out[starts] = lead
    for size in (1, 2, 4, 8):
        rows = np.flatnonzero(width == size)
        if len(rows):  # the last `size` bytes of the big-endian 64-bit form
            where = starts[rows][:, None] + 1 + np.arange(size)
            out[where] = payload[rows, 8 - size:]
    return _split(out, sizes)


def _split(buffer: np.ndarray, sizes: np.ndarray) -> list[bytes]:
    data = buffer.tobytes()
    ends = np.cumsum(sizes).tolist()
    begins = [0, *ends[:-1]]
    return [data[begin:end] for begin, end in zip(begins, ends, strict=True)]


def decode_column(stored: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, present) of stored values that are all msgpack ints, all floats or all bools
    (None: absent, present False); None when any other value is among them."""
    present = np.fromiter((raw is not None for raw in stored), bool, len(stored))
    raws = [raw for raw in stored if raw is not None]
    if not raws:
        return None
    sizes = np.fromiter(map(len, raws), np.int64, len(raws))
    buffer = np.frombuffer(b"".join(raws), np.uint8)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    lead = buffer[starts]
    values = _decode_integers(buffer, starts, sizes, lead)
    if values is None:
        values = _decode_floats(buffer, starts, sizes, lead)
    if values is None:
        values = _decode_bools(sizes, lead)
    if values is None:
        return None
    full = np.zeros(len(stored), values.dtype)
    full[present] = values
    return full, present


def _decode_integers(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                     lead: np.ndarray) -> np.ndarray | None:
    fixed = (lead <= 0x7F) | (lead >= 0xE0)
    width = np.zeros(len(lead), np.int64)
    for code, size in _WIDTH_OF_LEAD.items():
        width[lead == code] = size
    if not bool(np.all(fixed | (width > 0))) or not bool(np.all(sizes == width + 1)):
        return None
    values = lead.astype(np.int8).astype(np.int64)  # fixints: the byte as a signed number
    values[lead <= 0x7F] = lead[lead <= 0x7F]
    for size in (1, 2, 4, 8):
        rows = np.flatnonzero(width == size)
        if not len(rows):
            continue
        raw = buffer[starts[rows][:, None] + 1 + np.arange(size)]
        signed = lead[rows] >= 0xD0
        for flag, kind in ((False, f">u{size}"), (True, f">i{size}")):
            picked = signed == flag
            if np.any(picked):
                numbers = np.ascontiguousarray(raw[picked]).view(kind).reshape(-1)
                if kind == ">u8" and np.any(numbers > np.iinfo(np.int64).max):
                    return None  # beyond int64: the per-value way keeps it exact
                values[rows[picked]] = numbers.astype(np.int64)
    return values


def _decode_floats(buffer: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                   lead: np.ndarray) -> np.ndarray | None:
    if not bool(np.all(lead == _FLOAT_LEAD)) or not bool(np.all(sizes == 9)):
        return None
    raw = buffer[starts[:, None] + 1 + np.arange(8)]
    return np.ascontiguousarray(raw).view(">f8").reshape(-1).astype(np.float64)


def _decode_bools(sizes: np.ndarray, lead: np.ndarray) -> np.ndarray | None:
    if not bool(np.all((lead == _TRUE) | (lead == _FALSE))) or not bool(np.all(sizes == 1)):
        return None
    return lead == _TRUE
