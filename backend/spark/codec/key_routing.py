"""Which state partition a stored key belongs to: its grouping key, hashed as Spark does.

Every column family backend.spark writes holds the encoded grouping key (a msgpack array,
codec/values.py) at the start of its stored keys, except the timer index by expiry, where it
follows the 8-byte expiry (time/timers.py). The key values are decoded and hashed with the key
columns' Spark types (recorded in the commit log), so a key lands exactly where the stateful
stage's `pmod(hash(key columns), n)` sends its rows. No Spark is needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgpack
import numpy as np

from pyspark_dstl.backend.spark.codec.spark_hash import check_key_types, hash_longs, spark_hash
from pyspark_dstl.backend.spark.codec.values import _key_ext_hook
from pyspark_dstl.backend.spark.errors import StateDecodingError
from pyspark_dstl.backend.spark.time.timers import BY_EXPIRY_CF, EXPIRY_WIDTH


def grouping_key(cf: str, stored: bytes) -> list[object]:
    """The grouping key values at the start of a stored key of column family `cf`."""
    data = stored[EXPIRY_WIDTH:] if cf == BY_EXPIRY_CF else stored
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_key_ext_hook,
                                max_buffer_size=max(len(data), 1024))
    unpacker.feed(data)
    try:
        values = unpacker.unpack()
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"column family {cf!r}: stored key {stored[:40]!r} does not "
                                 f"start with a grouping key: {exc}") from exc
    if not isinstance(values, list):
        raise StateDecodingError(f"column family {cf!r}: stored key {stored[:40]!r} does not "
                                 f"start with a grouping key (a msgpack array)")
    return values


class KeyRouter:
    """Routes stored keys to the partitions `pmod(hash(key columns), partitions)` names."""

    def __init__(self, key_types: Sequence[str], partitions: int) -> None:
        self.key_types = check_key_types(key_types)
        self.partitions = partitions
        self._numpy = self.key_types == ("bigint",)  # one long key: hashed in numpy

    def __call__(self, cf: str, keys: Sequence[bytes]) -> np.ndarray:
        if self._numpy:
            values = single_ints(keys, EXPIRY_WIDTH if cf == BY_EXPIRY_CF else 0)
            if values is not None:
                return hash_longs(values).astype(np.int64) % self.partitions
        groups = [grouping_key(cf, key) for key in keys]
        return np.array([spark_hash(g, self.key_types) for g in groups],
                        dtype=np.int64) % self.partitions


# msgpack integer formats after the one-element array marker 0x91: type byte -> (width, signed)
_INT_FORMATS = {0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False),
                0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True)}


def single_ints(keys: Sequence[bytes], offset: int) -> np.ndarray | None:
    """The int64 of every key that is a msgpack array of one integer at `offset`, decoded in
    numpy; None when any key is something else (the caller then decodes key by key)."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if (lengths < offset + 2).any():
        return None
    buffer = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) + offset
    if (buffer[starts] != 0x91).any():
        return None
    kinds = buffer[starts + 1].astype(np.int64)
    values = np.where(kinds < 0x80, kinds, kinds - 256)  # positive and negative fixints
    fixed = (kinds < 0x80) | (kinds >= 0xE0)
    handled = fixed.copy()
    for kind, (width, signed) in _INT_FORMATS.items():
        chosen = np.flatnonzero(kinds == kind)
        if not len(chosen):
            continue
        if (lengths[chosen] < offset + 2 + width).any():
            return None
        raw = np.zeros(len(chosen), dtype=np.uint64)
        for byte in range(width):  # big-endian
            raw = (raw << np.uint64(8)) | buffer[starts[chosen] + 2 + byte].astype(np.uint64)
        if signed and width < 8:
            limit = np.uint64(1 << (8 * width - 1))
            number = raw.astype(np.int64) - np.where(raw >= limit, 1 << (8 * width), 0)
        elif width == 8:
            if not signed and (raw >= np.uint64(1 << 63)).any():
                return None  # beyond int64: not a Spark bigint
            number = raw.view(np.int64)
        else:
            number = raw.astype(np.int64)
        values[chosen] = number
        handled[chosen] = True
    return values if handled.all() else None
