"""The key group in front of every stored grouping key, and how the stage routes rows by it.

A key's group is `pmod(hash(key columns), G)` with Spark's `hash` (Murmur3, seed 42). In the
stateful stage Spark computes it into `GROUP_COLUMN`, and the task prefixes each distinct key's
bytes with it in Arrow; only keys a processor passes itself (another key's state, timers by
key) are hashed here in Python (`KeyGrouping`), with the key columns' Spark types. A batch
written with grouped keys records `{LAYOUT: {"key_groups": G}}` in its commit entry; an entry
without it holds keys without groups (the layout before key groups).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pyspark_dstl.backend.rescale.key_groups import GROUP_WIDTH, MAX_KEY_GROUPS
from pyspark_dstl.spark.codec.values import encode_key
from pyspark_dstl.spark.keys.spark_hash import hash_longs, spark_hash
from pyspark_dstl.spark.spark_errors import PartitioningError

GROUP_COLUMN = "__dstl_key_group"  # the stage's column: pmod(hash(key columns), G), an int
@dataclass(frozen=True)
class KeyGrouping:
    """Spark's key group of grouping keys given as tuples, and their stored bytes. Any key
    type works in the stage (Spark computes the groups); a key type without a Python hash
    (spark_hash.SUPPORTED_TYPES) is refused only when a processor passes keys itself."""

    key_types: tuple[str, ...]
    key_groups: int

    def __post_init__(self) -> None:
        if not 1 <= self.key_groups <= MAX_KEY_GROUPS:
            raise PartitioningError(f"{self.key_groups} key groups: a stored key group has "
                                    f"{GROUP_WIDTH} bytes, so 1 to {MAX_KEY_GROUPS}")

    def group_of(self, key: Sequence[Any]) -> int:
        """pmod(Spark's hash of the key's values, G)."""
        return spark_hash(key, self.key_types) % self.key_groups

    def groups_of(self, keys: Sequence[Sequence[Any]]) -> np.ndarray:
        """The group of every key; one bigint column of non-null ints is hashed in numpy."""
        if self.key_types == ("bigint",) and keys:
            values = [key[0] for key in keys]
            if all(type(v) is int for v in values):
                try:
                    longs = np.array(values, dtype=np.int64)
                except OverflowError:
                    longs = None
                if longs is not None:
                    return hash_longs(longs).astype(np.int64) % self.key_groups
        return np.fromiter((self.group_of(key) for key in keys), dtype=np.int64,
                           count=len(keys))

    def encode(self, keys: Sequence[Sequence[Any]]) -> list[bytes]:
        """The stored bytes of every key: its group, then its msgpack array."""
        groups = self.groups_of(keys)
        return [encode_key(key, int(group)) for key, group in zip(keys, groups, strict=True)]


def with_group_column(table: pa.Table, key_columns: Sequence[str], grouping: KeyGrouping
                      ) -> pa.Table:
    """`table` with GROUP_COLUMN as the stage computes it, for tables built outside the stage
    (tools, benchmarks): each distinct key hashed once in Python."""
    if not len(table):
        return table.append_column(GROUP_COLUMN, pa.array([], pa.int32()))
    columns = [table.column(name).combine_chunks().dictionary_encode(null_encoding="encode")
               for name in key_columns]
    indices = np.stack([np.asarray(c.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
                        for c in columns], axis=1)
    distinct, inverse = np.unique(indices, axis=0, return_inverse=True)
    values = [c.dictionary.to_pylist() for c in columns]
    keys = [tuple(values[i][int(row[i])] for i in range(len(columns))) for row in distinct]
    groups = grouping.groups_of(keys)[np.asarray(inverse).reshape(-1)]
    return table.append_column(GROUP_COLUMN, pa.array(groups, pa.int32()))


def group_prefixes(groups: np.ndarray) -> pa.Array:
    """The stored form of every key group (GROUP_WIDTH bytes, big-endian), as one binary
    array built in numpy."""
    values = np.asarray(groups, dtype=np.int64)
    if len(values) and (values.min() < 0 or values.max() >= MAX_KEY_GROUPS):
        raise PartitioningError(f"key group {int(values.max())} out of range: the stage's "
                                f"{GROUP_COLUMN} column must hold pmod(hash(keys), G)")
    data = values.astype(">u2").tobytes()
    offsets = np.arange(len(values) + 1, dtype=np.int64) * GROUP_WIDTH
    return pa.Array.from_buffers(pa.large_binary(), len(values),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


@functools.lru_cache(maxsize=64)
def routing_longs(partitions: int) -> tuple[int, ...]:
    """For each partition t, a non-negative long whose Spark hash is t modulo `partitions`:
    `repartition(partitions, col)` sends a row to pmod(hash(col), partitions), so a column
    holding routing_longs(n)[p] puts the row in partition p."""
    if partitions < 1:
        raise PartitioningError(f"{partitions} partitions: at least one is needed")
    found = np.full(partitions, -1, dtype=np.int64)
    start, width = 0, max(64, 16 * partitions)
    while (found < 0).any():
        candidates = np.arange(start, start + width, dtype=np.int64)
        targets = hash_longs(candidates).astype(np.int64) % partitions
        missing = found < 0
        # the first candidate of each target: reversed assignment leaves the smallest
        firsts = np.full(partitions, -1, dtype=np.int64)
        firsts[targets[::-1]] = candidates[::-1]
        found = np.where(missing, firsts, found)
        start += width
    return tuple(int(value) for value in found)
