"""Which key group, and so which state partition, a stored key belongs to.

A checkpoint in the key-group layout carries every stored key's group in the key itself (2
bytes in front of the encoded grouping key, backend/rescale/key_groups.py), so a rescale reads it
without decoding. A checkpoint written before key groups existed (the hash layout: stored
keys are the bare msgpack grouping key, each in partition `pmod(hash(key columns), n)`) is
migrated once: every key is decoded and hashed with the key columns' Spark types (recorded in
the commit log), as the stateful stage's `pmod(hash(key columns), G)` would, and gets its group
in front. Every column family the Spark integration writes holds the encoded grouping key at
the start of its stored keys, except the timer index by expiry, where it follows the 8-byte expiry
(time/timers.py). No Spark is needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgpack
import numpy as np

from pyspark_dstl.backend.rescale.key_groups import (
    GROUP_WIDTH,
    check_partitions,
    group_bytes,
    owner,
)
from pyspark_dstl.spark.codec.values import _key_ext_hook
from pyspark_dstl.spark.keys.key_grouping import KeyGrouping
from pyspark_dstl.spark.keys.spark_hash import check_key_types, hash_longs
from pyspark_dstl.spark.spark_errors import StateDecodingError
from pyspark_dstl.spark.time.timers import BY_EXPIRY_CF, EXPIRY_WIDTH


def key_offset(cf: str) -> int:
    """Where the encoded grouping key (and so its key group) starts in `cf`'s stored keys."""
    return EXPIRY_WIDTH if cf == BY_EXPIRY_CF else 0


def grouping_key(cf: str, stored: bytes, grouped: bool = True) -> list[object]:
    """The grouping key values in a stored key of column family `cf` (`grouped`: of the
    key-group layout, else of the hash layout)."""
    data = stored[key_offset(cf) + (GROUP_WIDTH if grouped else 0):]
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_key_ext_hook,
                                max_buffer_size=max(len(data), 1024))
    unpacker.feed(data)
    try:
        values = unpacker.unpack()
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"column family {cf!r}: stored key {stored[:40]!r} does not "
                                 f"hold a grouping key where expected: {exc}") from exc
    if not isinstance(values, list):
        raise StateDecodingError(f"column family {cf!r}: stored key {stored[:40]!r} does not "
                                 f"hold a grouping key (a msgpack array) where expected")
    return values


class HashLayoutMigration:
    """Places stored keys of the hash layout in the key-group layout of `partitions`: each
    key's new partition, and the key with its group in front of its grouping key."""

    def __init__(self, key_types: Sequence[str], partitions: int, key_groups: int) -> None:
        check_partitions(partitions, key_groups)
        self.grouping = KeyGrouping(check_key_types(key_types), key_groups)
        self.partitions = partitions
        self.key_groups = key_groups
        self._numpy = self.grouping.key_types == ("bigint",)  # one long key: decoded in numpy

    def groups(self, cf: str, keys: Sequence[bytes]) -> np.ndarray:
        """The key group of every stored key of `cf` (hash layout)."""
        if self._numpy:
            values = single_ints(keys, key_offset(cf))
            if values is not None:
                return hash_longs(values).astype(np.int64) % self.key_groups
        return self.grouping.groups_of([grouping_key(cf, key, grouped=False) for key in keys])

    def __call__(self, cf: str, keys: Sequence[bytes]) -> tuple[np.ndarray, list[bytes]]:
        groups = self.groups(cf, keys)
        at = key_offset(cf)
        placed = [key[:at] + group_bytes(group) + key[at:]
                  for key, group in zip(keys, groups.tolist(), strict=True)]
        return owner(groups, self.partitions, self.key_groups), placed


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
