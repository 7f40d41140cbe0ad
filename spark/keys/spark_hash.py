"""Spark's `hash()` (Murmur3 x86 32-bit, seed 42) of grouping key values, in Python.

The stateful stage sends a row to state partition `pmod(hash(key columns), n)`, computed by
Spark. A rescale must put every stored key where that expression puts it under the new count,
and the offline rescale runs without Spark: so the same function is computed here from the
stored (decoded) key values and the key columns' Spark types, which the commit log records.
Written from the algorithm (Murmur3 x86_32 with Spark's treatment of a byte tail and of each
type) and checked against Spark itself on many keys (tests/spark/keys/test_spark_hash.py).

Per type, as Spark hashes a column: byte, short, int, date and boolean (1/0) as a 32-bit int;
long, timestamp and timestamp_ntz (epoch microseconds) as a 64-bit long (low word, then high
word); float and double by their IEEE bits, -0.0 as 0.0 and every NaN as the canonical NaN;
string (UTF-8) and binary bytes four at a time, then each remaining byte on its own. A null
leaves the running hash as it was; each column's hash seeds the next.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from pyspark_dstl.spark.codec.values import timestamp_micros
from pyspark_dstl.spark.spark_errors import PartitioningError

SEED = 42
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF
_EPOCH_DAY = dt.date(1970, 1, 1)

INT_TYPES = frozenset({"tinyint", "smallint", "int", "date", "boolean"})
LONG_TYPES = frozenset({"bigint", "timestamp", "timestamp_ntz"})
SUPPORTED_TYPES = INT_TYPES | LONG_TYPES | {"float", "double", "string", "binary"}


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def hash_int(value: int, seed: int) -> int:
    """Murmur3 of a 32-bit int; seed and result as unsigned 32-bit."""
    return _fmix(_mix_h1(seed, _mix_k1(value & _MASK)), 4)


def hash_long(value: int, seed: int) -> int:
    low, high = value & _MASK, (value >> 32) & _MASK
    h1 = _mix_h1(seed, _mix_k1(low))
    h1 = _mix_h1(h1, _mix_k1(high))
    return _fmix(h1, 8)


def hash_bytes(data: bytes, seed: int) -> int:
    """Spark's hashUnsafeBytes: 4-byte little-endian words, then each tail byte (signed)
    mixed as a whole word of its own."""
    length = len(data)
    aligned = length - length % 4
    h1 = seed
    for (word,) in struct.iter_unpack("<I", data[:aligned]):
        h1 = _mix_h1(h1, _mix_k1(word))
    for byte in data[aligned:]:
        signed = byte - 256 if byte > 127 else byte
        h1 = _mix_h1(h1, _mix_k1(signed & _MASK))
    return _fmix(h1, length)


def _float_bits(value: float) -> int:
    if value == 0.0:
        return 0
    if math.isnan(value):
        return 0x7FC00000
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def _double_bits(value: float) -> int:
    if value == 0.0:
        return 0
    if math.isnan(value):
        return 0x7FF8000000000000
    return int(struct.unpack("<Q", struct.pack("<d", value))[0])


def _hash_value(value: Any, spark_type: str, seed: int) -> int:
    if value is None:
        return seed
    if spark_type == "date":
        days = value if isinstance(value, int) else (value - _EPOCH_DAY).days
        return hash_int(days, seed)
    if spark_type in INT_TYPES:
        return hash_int(int(value), seed)
    if spark_type in ("timestamp", "timestamp_ntz"):
        micros = value if isinstance(value, int) else timestamp_micros(value)
        return hash_long(micros, seed)
    if spark_type in LONG_TYPES:
        return hash_long(int(value), seed)
    if spark_type == "float":
        return hash_int(_float_bits(float(value)), seed)
    if spark_type == "double":
        return hash_long(_double_bits(float(value)), seed)
    if spark_type == "string":
        return hash_bytes(str(value).encode("utf-8"), seed)
    if spark_type == "binary":
        return hash_bytes(bytes(value), seed)
    raise PartitioningError(f"grouping key column type {spark_type!r} has no Spark hash here "
                            f"(supported: {', '.join(sorted(SUPPORTED_TYPES))})")


def check_key_types(types: Sequence[str]) -> tuple[str, ...]:
    """The key columns' Spark type names, refused when one has no hash here."""
    unknown = [t for t in types if t not in SUPPORTED_TYPES]
    if unknown:
        raise PartitioningError(f"grouping key column type {unknown[0]!r} cannot be "
                                f"rescaled (supported: {', '.join(sorted(SUPPORTED_TYPES))})")
    return tuple(types)


def spark_hash(values: Sequence[Any], types: Sequence[str]) -> int:
    """Spark's `hash(*columns)` of one row's key values, as a signed 32-bit int."""
    if len(values) != len(types):
        raise PartitioningError(f"grouping key {tuple(values)!r:.80} has {len(values)} "
                                f"value(s), the checkpoint records {len(types)} key column(s)")
    h = SEED
    for value, spark_type in zip(values, types, strict=True):
        h = _hash_value(value, spark_type, h)
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(values: Sequence[Any], types: Sequence[str], partitions: int) -> int:
    """`pmod(hash(key columns), partitions)`: the state partition Spark sends the key to."""
    return spark_hash(values, types) % partitions


# --- numpy: whole columns of 64-bit keys at once (the common single bigint key) ----------------

def _np_rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _np_mix(h1: np.ndarray, word: np.ndarray) -> np.ndarray:
    k1 = word * np.uint32(_C1)
    k1 = _np_rotl(k1, 15) * np.uint32(_C2)
    h1 = _np_rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def hash_longs(values: np.ndarray, seed: int = SEED) -> np.ndarray:
    """hash_long of every int64, as signed int32 (wrapping uint32 arithmetic in numpy)."""
    raw = values.astype(np.int64).view(np.uint64)
    low = (raw & np.uint64(_MASK)).astype(np.uint32)
    high = (raw >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h1 = np.full(len(values), seed, dtype=np.uint32)
        h1 = _np_mix(_np_mix(h1, low), high)
        h1 ^= np.uint32(8)
        h1 ^= h1 >> np.uint32(16)
        h1 *= np.uint32(0x85EBCA6B)
        h1 ^= h1 >> np.uint32(13)
        h1 *= np.uint32(0xC2B2AE35)
        h1 ^= h1 >> np.uint32(16)
    return h1.view(np.int32)
