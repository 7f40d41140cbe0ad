"""The last write of each key over a run of change blocks, in ascending physical key order.

Replay needs only each key's last write (a put or delete replaces the key's whole state), and
RocksDB takes sorted writes an order of magnitude faster than random ones. Both come from one
stable sort of the keys in numpy: keys are padded with zeros to whole 8-byte words, which
compared word by word, the length last, is exactly bytewise order; the last entry of each run
of equal keys is the newest write. Where the bits that vary across a window's keys, their
length and the write's position fit in 64 bits together (keys of up to about 44 varying bits
in a window of a million writes: counters, dense ids, short codes), one integer per write
holds all three, and one np.sort of those integers gives the order and the runs (under half
the time of np.lexsort over two words and a comparison of neighbours); other keys are
sorted word by word with np.lexsort. The writes that remain are gathered into one sorted run
per column family (buffers and offsets, no Python object per write), which the RocksDB engine
writes as a table file and ingests whole (engines/sst_build.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyspark_dstl.backend.engines.columns import ColumnBlock
from pyspark_dstl.backend.engines.records import OP_DELETE, cf_prefix
from pyspark_dstl.backend.engines.sst_build import SortedRun, run_items

PAD_FACTOR = 3
"""Keys are padded to the longest one only while that takes at most PAD_FACTOR times their
bytes (plus a word per key); wider spreads are sorted by Python's sort instead."""


@dataclass
class LatestWrites:
    """One sorted run per column family, in physical key order: each key once, with its last
    value (a delete where the last write deleted it)."""

    runs: list[SortedRun]
    deletes: int

    @property
    def keys(self) -> list[bytes]:
        """The physical keys as objects (for small replays and tests)."""
        return [key for run in self.runs for key in run_items(run)[0]]

    @property
    def values(self) -> list[bytes | None]:
        return [value for run in self.runs for value in run_items(run)[1]]


def latest_writes(blocks: Sequence[ColumnBlock]) -> LatestWrites:
    """The last write per physical key over `blocks` (in the order they were written)."""
    by_cf: dict[str, list[ColumnBlock]] = {}
    for block in blocks:
        if len(block):
            by_cf.setdefault(block.cf, []).append(block)
    result = LatestWrites([], 0)
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
    ascending = _strictly_ascending(keys, offsets, lengths)
    padded = None if ascending is not None else _padded(keys, offsets, lengths)
    if ascending is not None:  # already in order, each key once (a bulk write in key order)
        order = ascending
        last = np.ones(len(order), np.bool_)
    elif padded is None:
        listed = block.key_list()
        order = np.array(sorted(range(len(listed)), key=listed.__getitem__), np.int64)
        ordered = [listed[i] for i in order.tolist()]
        last = np.ones(len(order), np.bool_)
        last[:-1] = np.fromiter(map(bytes.__ne__, ordered[1:], ordered[:-1]), np.bool_,
                                len(order) - 1)
    else:
        order, last = _sort_order(padded, lengths)
    chosen = order[last]
    key_data: bytes | memoryview | np.ndarray
    value_data: bytes | memoryview | np.ndarray
    if ascending is not None:  # every write stays, in its place: the buffers as they are
        key_data, key_offsets = keys, offsets
        value_data, value_offsets = block.values, block.value_offsets.astype(np.int64)
    else:
        key_data, key_offsets = _gather(keys, offsets, chosen)
        value_data, value_offsets = _gather(bytes(block.values),
                                            block.value_offsets.astype(np.int64), chosen)
    deleted = block.ops[chosen] == OP_DELETE
    count = int(deleted.sum())
    result.runs.append(SortedRun(prefix, key_data, key_offsets, value_data, value_offsets,
                                 deleted if count else None))
    result.deletes += count


def _strictly_ascending(keys: bytes, offsets: np.ndarray,
                        lengths: np.ndarray) -> np.ndarray | None:
    """arange(n) when keys of one length are already strictly ascending (one vectorized
    comparison of neighbours), else None: the sort and the search for repeats are skipped."""
    count = len(lengths)
    if count < 2:
        return np.arange(count)
    width = int(lengths[0])
    if width == 0 or int(lengths.min()) != width or int(lengths.max()) != width:
        return None
    strings = np.frombuffer(keys, f"S{width}", count, int(offsets[0]))
    if bool((strings[1:] > strings[:-1]).all()):  # one length: bytewise order, exactly
        return np.arange(count)
    return None


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


def _sort_order(rows: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable ascending bytewise order of the padded keys, and where each run of equal keys
    ends: big-endian words, then length (a key padded with zeros equals a longer one ending
    in zeros but sorts before it)."""
    varying = _varying_columns(rows, lengths)
    packed = _packed_order(varying, len(lengths))
    if packed is not None:
        return packed
    order: np.ndarray = np.lexsort(varying[::-1])  # lexsort: the last column sorts first
    ordered = np.take(rows.view(np.uint64), order, axis=0)  # whole words: fewer compares
    ordered_lengths = lengths[order]
    last = np.ones(len(order), np.bool_)
    last[:-1] = ((ordered[1:] != ordered[:-1]).any(axis=1)
                 | (ordered_lengths[1:] != ordered_lengths[:-1]))
    return order, last


def _varying_columns(rows: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """The keys' big-endian words, then their lengths, most significant first, as unsigned
    integers; a column that holds one value throughout (a shared prefix, keys of one length)
    is left out: it costs a pass of the sort and decides nothing."""
    words = rows.view(">u8")
    columns = [words[:, i].astype(np.uint64) for i in range(words.shape[1])]
    columns.append(lengths.astype(np.uint64))
    return [column for column in columns if column.min() != column.max()]


def _packed_order(columns: list[np.ndarray], count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """_sort_order from one sort of 64-bit integers, None when the columns do not fit.

    Each column (unsigned, most significant first) becomes a digit: its bits that never vary
    at the bottom shifted out, its minimum subtracted; the digits in mixed radix, then the
    write's position, make one integer per write whose order is the keys' order, stable."""
    position_bits = max(1, (count - 1).bit_length())
    digits: list[tuple[np.ndarray, int]] = []
    space = 1
    for column in columns:
        low, high = int(column.min()), int(column.max())
        varying_bits = int(np.bitwise_or.reduce(column ^ np.uint64(low)))
        shift = (varying_bits & -varying_bits).bit_length() - 1  # bits below never vary
        span = (high >> shift) - (low >> shift) + 1
        space *= span
        if space.bit_length() + position_bits > 64:
            return None
        digit = (column >> np.uint64(shift)) - np.uint64(low >> shift)
        digits.append((digit, span))
    packed = np.zeros(count, np.uint64)
    for digit, span in digits:
        packed *= np.uint64(span)
        packed += digit
    packed <<= np.uint64(position_bits)
    packed |= np.arange(count, dtype=np.uint64)
    packed.sort()  # each value unique: any sort is stable here
    order = (packed & np.uint64((1 << position_bits) - 1)).astype(np.int64)
    packed >>= np.uint64(position_bits)
    last = np.ones(count, np.bool_)
    last[:-1] = packed[1:] != packed[:-1]
    return order, last


def _gather(data: bytes, offsets: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """The byte strings `chosen` of a buffer with offsets, as one buffer with offsets:
    rows of one length gathered in numpy, others by Arrow's take."""
    count = len(offsets) - 1
    lengths = np.diff(offsets)
    if count and int(lengths.min()) == int(lengths.max()):
        width = int(lengths[0])
        start = int(offsets[0])
        if width == 0:
            return np.zeros(0, np.uint8), np.zeros(len(chosen) + 1, np.int64)
        rows = np.frombuffer(data, f"V{width}", count, start)  # np.take of whole rows:
        gathered = np.take(rows, chosen).view(np.uint8)  # a few times faster than 2-d indexing
        return gathered, np.arange(len(chosen) + 1, dtype=np.int64) * width
    import pyarrow as pa
    import pyarrow.compute as pc

    column = pa.Array.from_buffers(pa.large_binary(), count,
                                   [None, pa.py_buffer(offsets.astype(np.int64)),
                                    pa.py_buffer(data)])
    taken = pc.take(column, pa.array(chosen, pa.int64()))
    _, taken_offsets, taken_data = taken.buffers()
    new_offsets = np.frombuffer(taken_offsets, np.int64, len(chosen) + 1, taken.offset * 8)
    gathered = (np.frombuffer(taken_data, np.uint8) if taken_data is not None
                else np.zeros(0, np.uint8))
    return gathered, new_offsets
