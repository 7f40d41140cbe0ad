"""Key groups: the fixed units a checkpoint's keys are hashed into, so a rescale moves ranges.

A key's key group is pmod(hash of its grouping key, G), G fixed when the checkpoint is made
(`KEY_GROUPS`, recorded in its commit entries). Partition p of P owns the contiguous groups
[ceil(p*G/P), ceil((p+1)*G/P)) (Flink's assignment), so `owner(g) = g*P // G`, and every stored
key carries its group as `GROUP_WIDTH` big-endian bytes: at the start of the key in most column
families, so each partition's keys are one contiguous range per column family; a rescale then
copies or clips ranges instead of routing key by key. This module knows nothing of Spark; the
hash is the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pyspark_dstl.backend.lineage.commit_entry import LAYOUT  # extra: {"key_groups": G}

KEY_GROUPS = 4096  # the number of key groups of a new checkpoint; at most this many partitions
GROUP_WIDTH = 2  # bytes of the big-endian key group in front of a stored grouping key
MAX_KEY_GROUPS = 1 << (8 * GROUP_WIDTH)


def layout_extra(key_groups: int) -> dict[str, Any]:
    """The commit entry extra of a batch whose stored keys carry their key group."""
    return {LAYOUT: {"key_groups": key_groups}}


def key_groups_in(extra: Mapping[str, Any]) -> int | None:
    """The key groups a commit entry's `extra` records; None for the hash layout (keys
    without groups, each in partition pmod(hash, n): written before key groups existed)."""
    layout = extra.get(LAYOUT)
    if not isinstance(layout, dict) or not isinstance(layout.get("key_groups"), int):
        return None
    return int(layout["key_groups"])


def owner(groups: np.ndarray, partitions: int, key_groups: int) -> np.ndarray:
    """The partition owning each key group (p with p*G/P <= group < (p+1)*G/P)."""
    return np.asarray(groups, dtype=np.int64) * partitions // key_groups


def group_range(partition: int, partitions: int, key_groups: int) -> tuple[int, int]:
    """[first, end) of the key groups `partition` of `partitions` owns; `owner`'s inverse."""
    return (-(-partition * key_groups // partitions),
            -(-(partition + 1) * key_groups // partitions))


def group_bytes(group: int) -> bytes:
    """The stored form of a key group; `group_bytes(G)` ends the last group's range."""
    return group.to_bytes(GROUP_WIDTH, "big")


def groups_at(keys: Sequence[bytes], offset: int) -> np.ndarray:
    """The key group stored at byte `offset` of each key, read in numpy (no decoding)."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if (lengths < offset + GROUP_WIDTH).any():
        short = keys[int(np.flatnonzero(lengths < offset + GROUP_WIDTH)[0])]
        raise ValueError(f"stored key {short[:40]!r} is too short to hold a key group at byte "
                         f"{offset}")
    buffer = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) + offset
    return (buffer[starts].astype(np.int64) << 8) | buffer[starts + 1].astype(np.int64)


def check_partitions(partitions: int, key_groups: int) -> None:
    """Refuses more partitions than key groups (some partition would own none)."""
    if not 1 <= partitions <= key_groups:
        raise ValueError(f"{partitions} partition(s): a checkpoint with {key_groups} key "
                         f"groups can have 1 to {key_groups} partitions")
