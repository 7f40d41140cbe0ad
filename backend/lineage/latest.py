"""The last write of each key over a run of change blocks, in ascending physical key order.

Replay needs only each key's last write (a put or delete replaces the key's whole state), and
RocksDB takes sorted writes an order of magnitude faster than random ones. Both come from one
stable sort of the keys in numpy: keys are padded with zeros to whole 8-byte words and sorted
word by word (np.lexsort, stable), the length last, which is exactly bytewise order; the last
entry of each run of equal keys is the newest write. Python objects are made only for the
writes that remain, for the engine's WriteBatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from pyspark_dstl.backend.engines.columns import ColumnBlock
from pyspark_dstl.backend.engines.records import OP_DELETE, cf_prefix

PAD_FACTOR = 3
"""Keys are padded to the longest one only while that takes at most PAD_FACTOR times their
bytes (plus a word per key); wider spreads are sorted by Python's sort instead."""


@dataclass
class LatestWrites:
    """Physical keys in ascending order, each once, with its last value (None: deleted)."""

    keys: list[bytes]
    values: list[bytes | None]
    deletes: int


def latest_writes(blocks: Sequence[ColumnBlock]) -> LatestWrites:
    """The last write per physical key over `blocks` (in the order they were written)."""
    by_cf: dict[str, list[ColumnBlock]] = {}
    for block in blocks:
        if len(block):
            by_cf.setdefault(block.cf, []).append(block)
    result = LatestWrites([], [], 0)
    for cf in sorted(by_cf, key=cf_prefix):  # physical order: cf prefix, then user key
        _add_cf(result, cf_prefix(cf), _concat(by_cf[cf]))
    return result


def _concat(blocks: list[ColumnBlock]) -> ColumnBlock:
    if len(blocks) == 1:
        return blocks[0]
    return ColumnBlock(blocks[0].cf, np.concatenate([b.ops for b in blocks]),
                       _join_offsets([b.key_offsets for b in blocks]),
                       b"".join(b.keys for b in blocks),
                       _join_offsets([b.value_offsets for b in blocks]),
                       b"".join(b.values for b in blocks))


def _join_offsets(parts: list[np.ndarray]) -> np.ndarray:
    shifted = [np.zeros(1, np.int64)]
    base = 0
    for offsets in parts:
        shifted.append(offsets[1:].astype(np.int64) + base)
        base += int(offsets[-1])
    return np.concatenate(shifted)


def _add_cf(result: LatestWrites, prefix: bytes, block: ColumnBlock) -> None:
    offsets = block.key_offsets.astype(np.int64)
    lengths = np.diff(offsets)
    keys = bytes(block.keys)
    padded = _padded(keys, offsets, lengths)
    if padded is None:
        listed = block.key_list()
        order = np.array(sorted(range(len(listed)), key=listed.__getitem__), np.int64)
        ordered = [listed[i] for i in order.tolist()]
        last = np.ones(len(order), np.bool_)
        last[:-1] = np.fromiter(map(bytes.__ne__, ordered[1:], ordered[:-1]), np.bool_,
                                len(order) - 1)
    else:
        order = _sort_order(padded, lengths)
        ordered_rows, ordered_lengths = padded[order], lengths[order]
        last = np.ones(len(order), np.bool_)
        last[:-1] = ((ordered_rows[1:] != ordered_rows[:-1]).any(axis=1)
                     | (ordered_lengths[1:] != ordered_lengths[:-1]))
    chosen = order[last]
    result.keys += _physical_keys(prefix, keys, offsets, lengths, chosen)
    values = cast(list[bytes | None],
                  _take(bytes(block.values), block.value_offsets.astype(np.int64), chosen))
    deleted = np.flatnonzero(block.ops[chosen] == OP_DELETE).tolist()
    for index in deleted:
        values[index] = None
    result.values += values
    result.deletes += len(deleted)


def _padded(keys: bytes, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray | None:
    """Keys as rows of zero-padded 8-byte words (uint8, n x 8w), None when too wide."""
    count = len(lengths)
    widest = int(lengths.max()) if count else 0
    width = max(8, -(-widest // 8) * 8)
    if count * width > PAD_FACTOR * len(keys) + 8 * count:
        return None
    rows = np.zeros((count, width), np.uint8)
    flat = np.frombuffer(keys, np.uint8)
    if count and int(lengths.min()) == widest:
        rows[:, :widest] = flat.reshape(count, widest)
    else:
        row = np.repeat(np.arange(count), lengths)
        column = np.arange(len(flat)) - np.repeat(offsets[:-1], lengths)
        rows[row, column] = flat
    return rows


def _sort_order(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Stable ascending bytewise order of the padded keys: big-endian words, then length
    (a key padded with zeros equals a longer one ending in zeros but sorts before it).
    Columns that hold one value throughout (a shared prefix, keys of one length) are left
    out: each costs a pass of the sort."""
    words = rows.view(">u8")
    columns = [lengths] + [words[:, i].astype(np.uint64)
                           for i in range(words.shape[1] - 1, -1, -1)]
    varying = [column for column in columns if column.min() != column.max()]
    if not varying:
        return np.arange(len(lengths))
    order: np.ndarray = np.lexsort(varying)
    return order


def _physical_keys(prefix: bytes, keys: bytes, offsets: np.ndarray, lengths: np.ndarray,
                   chosen: np.ndarray) -> list[bytes]:
    if len(chosen) and int(lengths.min()) == int(lengths.max()):
        width = int(lengths[0])
        rows = np.empty((len(chosen), len(prefix) + width), np.uint8)
        rows[:, :len(prefix)] = np.frombuffer(prefix, np.uint8)
        rows[:, len(prefix):] = np.frombuffer(keys, np.uint8).reshape(-1, width)[chosen]
        listed: list[bytes] = rows.view(f"V{len(prefix) + width}").ravel().tolist()
        return listed
    return list(map(prefix.__add__, _take(keys, offsets, chosen)))


def _take(data: bytes, offsets: np.ndarray, chosen: np.ndarray) -> list[bytes]:
    """The byte strings `chosen` of a buffer with offsets (one length: gathered in numpy)."""
    count = len(offsets) - 1
    if count and offsets[-1] and offsets[-1] == (offsets[1] - offsets[0]) * count:
        width = int(offsets[1] - offsets[0])
        if (np.diff(offsets) == width).all():
            rows = np.frombuffer(data, np.uint8, count * width).reshape(count, width)[chosen]
            listed: list[bytes] = rows.view(f"V{width}").ravel().tolist()
            return listed
    starts = offsets[:-1][chosen].tolist()
    ends = offsets[1:][chosen].tolist()
    return list(map(data.__getitem__, map(slice, starts, ends)))
