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
        groups = [grouping_key(cf, key) for key in keys]
        if self._numpy and all(len(g) == 1 and isinstance(g[0], int) for g in groups):
            values = np.fromiter((g[0] for g in groups), dtype=np.int64, count=len(groups))
            return hash_longs(values).astype(np.int64) % self.partitions
        return np.array([spark_hash(g, self.key_types) for g in groups],
                        dtype=np.int64) % self.partitions
