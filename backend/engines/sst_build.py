"""SST files built from columns: RocksDB's block-based table written without a call per key.

rocksdict's WriteBatch and SstFileWriter take one Python call per key, which costs about what
the rest of a bulk write or a replay costs together (benchmarks/write_path, recovery). Here a
sorted run of writes (physical keys strictly ascending, each a put or a delete) becomes one
table file in a few vectorized passes: numpy computes the varint lengths, the block
boundaries, the restart arrays and the index; Arrow's element-wise binary join lays out every
entry and every block's tail in one buffer; one CRC-32C per block (google-crc32c) checks it.
RocksDB then takes the file whole with ingest_external_file.

The file is what RocksDB's own SstFileWriter writes for ingestion (block-based table, format
version 5, external file version 2, every sequence number 0, so the ingestion gives the whole
file one new sequence number), with these choices:
- no compression, no filter, a binary-search index of full internal keys and full block
  handles (so the reader needs none of format 5's index options);
- every key stored whole (no shared prefixes), a restart point every RESTART_INTERVAL
  entries, blocks of about BLOCK_SIZE bytes (larger than RocksDB's 4 KiB default: one CRC
  call and one slice per block is the only work done per block in Python);
- a delete is a tombstone (value type 0): a key deleted in a replayed tail is absent after
  the ingestion, whatever older files hold.
RocksDB compacts ingested files like any other, into its own settings.
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BLOCK_SIZE = 32 * 1024
RESTART_INTERVAL = 16
FORMAT_VERSION = 5
MAGIC = 0x88E241B785F4CFF7  # RocksDB's block-based table
CHECKSUM_CRC32C = 1
TYPE_DELETE = 0
TYPE_PUT = 1
NO_COMPRESSION = b"\x00"
UNKNOWN_COLUMN_FAMILY = 0x7FFFFFFF
FOOTER_SIZE = 53  # checksum type, two handles padded to 40 bytes, format version, magic
_PUT_TRAILER = struct.pack("<Q", TYPE_PUT)  # sequence number 0, value type
_DELETE_TRAILER = struct.pack("<Q", TYPE_DELETE)
_BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class SortedRun:
    """Writes of one column family: keys[i] (bytes key_offsets[i]:key_offsets[i + 1] of
    `keys`, after `prefix`) gets values[i], or is deleted where `deletes[i]`; physical keys
    (prefix + key) strictly ascending, and ascending from one run to the next."""

    prefix: bytes
    keys: bytes | memoryview | np.ndarray
    key_offsets: np.ndarray
    values: bytes | memoryview | np.ndarray
    value_offsets: np.ndarray
    deletes: np.ndarray | None = None  # bool, None: puts only

    def __len__(self) -> int:
        return len(self.key_offsets) - 1


def run_items(run: SortedRun) -> tuple[list[bytes], list[bytes | None]]:
    """The run's physical keys and values as objects (None: a delete), for engines and
    writes too small for a table file."""
    keys = bytes(run.keys)
    values = bytes(run.values)
    key_bounds = run.key_offsets.tolist()
    value_bounds = run.value_offsets.tolist()
    prefix = run.prefix
    physical = [prefix + keys[a:b] for a, b in itertools.pairwise(key_bounds)]
    listed: list[bytes | None] = [values[a:b] for a, b in itertools.pairwise(value_bounds)]
    if run.deletes is not None:
        for index in np.flatnonzero(run.deletes).tolist():
            listed[index] = None
    return physical, listed


def run_bytes(run: SortedRun) -> int:
    return (int(run.key_offsets[-1] - run.key_offsets[0])
            + int(run.value_offsets[-1] - run.value_offsets[0]) + 16 * len(run))


@dataclass
class TableStats:
    entries: int = 0
    deletes: int = 0
    data_blocks: int = 0
    file_bytes: int = 0


def write_table(path: str, runs: Sequence[SortedRun], block_size: int = BLOCK_SIZE) -> TableStats:
    """Write `runs` (in order) as one table file at `path`; at least one write needed."""
    import google_crc32c

    stats = TableStats()
    pieces: list[Any] = []  # buffers written in order
    offset = 0
    index_keys: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (run keys, rows, handles)
    raw_key_size = raw_value_size = 0
    for run in runs:
        count = len(run)
        if not count:
            continue
        layout = _layout(run, block_size)
        joined = _entries(run, layout)
        data = joined.buffers()[2]
        ends = layout.block_ends  # byte ends of every block's content + type byte
        starts = np.concatenate(([0], ends[:-1]))
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            block = data.slice(start, end - start)
            pieces.append(block)
            pieces.append(_masked(google_crc32c.value(block)).to_bytes(4, "little"))
        handles = np.empty((len(ends), 2), np.int64)
        handles[:, 0] = offset + starts + 4 * np.arange(len(ends))  # each earlier block's CRC
        handles[:, 1] = ends - starts - 1  # without the type byte
        index_keys.append((run, layout.block_last, handles))
        offset += int(ends[-1]) + 4 * len(ends)
        stats.entries += count
        stats.deletes += int(run.deletes.sum()) if run.deletes is not None else 0
        stats.data_blocks += len(ends)
        raw_key_size += (int(run.key_offsets[-1] - run.key_offsets[0])
                         + (len(run.prefix) + 8) * count)
        raw_value_size += int(run.value_offsets[-1] - run.value_offsets[0])
    if not stats.entries:
        raise ValueError(f"{path!r}: a table needs at least one write")
    data_size = offset
    index_block = _index_block(index_keys)
    index_handle = (offset, len(index_block))
    pieces += [index_block, _trailer(index_block)]
    offset += len(index_block) + 5
    properties = _block(_properties(stats, data_size, len(index_block) + 5, raw_key_size,
                                    raw_value_size), restart_every=1)
    properties_handle = (offset, len(properties))
    pieces += [properties, _trailer(properties)]
    offset += len(properties) + 5
    metaindex = _block([(b"rocksdb.properties", _handle(*properties_handle))], restart_every=1)
    metaindex_handle = (offset, len(metaindex))
    pieces += [metaindex, _trailer(metaindex)]
    offset += len(metaindex) + 5
    footer_handles = _handle(*metaindex_handle) + _handle(*index_handle)
    footer = (bytes((CHECKSUM_CRC32C,)) + footer_handles + bytes(40 - len(footer_handles))
              + struct.pack("<IQ", FORMAT_VERSION, MAGIC))
    pieces.append(footer)
    stats.file_bytes = offset + len(footer)
    with open(path, "xb") as handle:  # RocksDB syncs the file as it ingests it
        handle.writelines(pieces)
    return stats


@dataclass
class _Layout:
    header_key: np.ndarray  # varint of the internal key's length, rows of 5 with lengths
    header_value: np.ndarray
    block_ends: np.ndarray  # per block: end of its content + type byte in the joined buffer
    block_last: np.ndarray  # per block: index of its last entry
    tails: Any  # per entry: its block's restart array, count and type byte when last, else b""


def _layout(run: SortedRun, block_size: int, restart_interval: int = RESTART_INTERVAL,
            values_of_deletes: bool = False) -> _Layout:
    """Where every entry and block goes; `values_of_deletes`: the index, whose entries
    carry a block handle also under a delete's key."""
    import pyarrow as pa

    count = len(run)
    key_lengths = np.diff(run.key_offsets).astype(np.int64) + len(run.prefix) + 8
    value_lengths = np.diff(run.value_offsets).astype(np.int64)
    if (not values_of_deletes and run.deletes is not None
            and (value_lengths[run.deletes] != 0).any()):
        raise ValueError("a delete carries no value")
    varint_key, key_bytes = _varints(key_lengths)
    varint_value, value_bytes = _varints(value_lengths)
    sizes = 1 + key_bytes + value_bytes + key_lengths + value_lengths
    starts = np.zeros(count, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    block = starts // block_size  # a block starts where an entry starts past the next multiple
    first = np.flatnonzero(np.concatenate(([True], block[1:] != block[:-1])))
    last = np.concatenate((first[1:] - 1, [count - 1]))
    block_of_entry = np.repeat(np.arange(len(first)), np.diff(np.concatenate((first, [count]))))
    position = np.arange(count) - first[block_of_entry]
    restart = position % restart_interval == 0
    restart_offsets = (starts - starts[first][block_of_entry])[restart].astype(np.uint32)
    restarts_per_block = np.bincount(block_of_entry[restart], minlength=len(first))
    # each block's tail: its restart offsets, their count (u32 each), then the type byte
    words = np.insert(restart_offsets, np.cumsum(restarts_per_block),
                      restarts_per_block.astype(np.uint32)).astype("<u4")
    word_bytes = words.view(np.uint8)
    tail_lengths = 4 * (restarts_per_block + 1) + 1
    tail_data = np.insert(word_bytes, np.cumsum(4 * (restarts_per_block + 1)), 0)
    entry_tail = np.zeros(count, np.int64)
    entry_tail[last] = tail_lengths
    tail_offsets = np.zeros(count + 1, np.int64)
    np.cumsum(entry_tail, out=tail_offsets[1:])
    tails = pa.Array.from_buffers(pa.large_binary(), count,
                                  [None, pa.py_buffer(tail_offsets), pa.py_buffer(tail_data)])
    content_end = starts + sizes
    block_ends = content_end[last] + np.cumsum(tail_lengths)
    return _Layout(varint_key, varint_value, block_ends, last, tails)


def _entries(run: SortedRun, layout: _Layout) -> Any:
    """One buffer holding every entry and every block's tail (no checksums), in order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(run)
    trailer: Any
    if run.deletes is None or not run.deletes.any():
        trailer = pa.scalar(_PUT_TRAILER, pa.large_binary())
    else:
        rows = np.frombuffer(_PUT_TRAILER * count, np.uint8).reshape(count, 8).copy()
        rows[run.deletes, 0] = TYPE_DELETE
        trailer = _fixed(rows)
    return pc.binary_join_element_wise(
        pa.scalar(b"\x00", pa.large_binary()),  # shared bytes: none
        _ragged(layout.header_key), _ragged(layout.header_value),
        pa.scalar(run.prefix, pa.large_binary()),
        _column(run.keys, run.key_offsets, count), trailer,
        _column(run.values, run.value_offsets, count), layout.tails,
        pa.scalar(b"", pa.large_binary()))  # the separator


def _column(data: bytes | memoryview | np.ndarray, offsets: np.ndarray, count: int) -> Any:
    import pyarrow as pa

    return pa.Array.from_buffers(pa.large_binary(), count,
                                 [None, pa.py_buffer(offsets.astype(np.int64)),
                                  pa.py_buffer(data)])


def _fixed(rows: np.ndarray) -> Any:
    count, width = rows.shape
    return _column(np.ascontiguousarray(rows).reshape(-1), np.arange(count + 1) * width, count)


def _ragged(encoded: tuple[np.ndarray, np.ndarray] | np.ndarray) -> Any:
    rows, lengths = encoded if isinstance(encoded, tuple) else (encoded, None)
    if lengths is None:
        return _fixed(rows)
    mask = np.arange(rows.shape[1]) < lengths[:, None]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _column(rows[mask], offsets, len(lengths))


def _varints(values: np.ndarray) -> tuple[Any, np.ndarray]:
    """LEB128 of every value: rows of their bytes (one column when every value takes one
    byte) or (rows of 10, lengths); and the number of bytes of each."""
    values = values.astype(np.uint64)
    if not len(values) or int(values.max()) < 0x80:
        return values.astype(np.uint8)[:, None], np.ones(len(values), np.int64)
    places = max(1, -(-int(values.max()).bit_length() // 7))
    rows = np.zeros((len(values), places), np.uint8)
    lengths = np.ones(len(values), np.int64)
    for place in range(places):
        more = (values >> np.uint64(7 * (place + 1))) != 0
        rows[:, place] = ((values >> np.uint64(7 * place)) & np.uint64(0x7F)).astype(np.uint8) \
            | (more.astype(np.uint8) << 7)
        lengths += more
    return (rows, lengths), lengths


def _index_block(runs: list[tuple[SortedRun, np.ndarray, np.ndarray]]) -> bytes:
    """One block with an entry per data block (a restart at every entry): the block's last
    internal key (a valid separator) and its handle, laid out like the data blocks."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys: list[np.ndarray] = []
    key_lengths: list[np.ndarray] = []
    deletes: list[np.ndarray] = []
    handles = np.concatenate([block_handles for _, _, block_handles in runs])
    for run, last, _ in runs:
        offsets = run.key_offsets.astype(np.int64)
        data = run.keys if isinstance(run.keys, np.ndarray) else np.frombuffer(run.keys, np.uint8)
        lengths = offsets[last + 1] - offsets[last]
        starts = np.zeros(len(last), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        picked = data[np.repeat(offsets[last] - starts, lengths)
                      + np.arange(int(lengths.sum()))]
        bounds = np.zeros(len(last) + 1, np.int64)
        np.cumsum(lengths, out=bounds[1:])
        prefixed = pc.binary_join_element_wise(
            pa.scalar(run.prefix, pa.large_binary()), _column(picked, bounds, len(last)),
            pa.scalar(b"", pa.large_binary()))
        keys.append(np.frombuffer(prefixed.buffers()[2], np.uint8))
        key_lengths.append(lengths + len(run.prefix))
        deletes.append(np.zeros(len(last), np.bool_) if run.deletes is None
                       else run.deletes[last])
    all_lengths = np.concatenate(key_lengths)
    key_offsets = np.zeros(len(all_lengths) + 1, np.int64)
    np.cumsum(all_lengths, out=key_offsets[1:])
    offset_bytes, offset_lengths = _varints(handles[:, 0])
    size_bytes, size_lengths = _varints(handles[:, 1])
    value_offsets = np.zeros(len(handles) + 1, np.int64)
    np.cumsum(offset_lengths + size_lengths, out=value_offsets[1:])
    values = pc.binary_join_element_wise(_ragged(offset_bytes), _ragged(size_bytes),
                                         pa.scalar(b"", pa.large_binary()))
    index = SortedRun(b"", np.concatenate(keys), key_offsets,
                      np.frombuffer(values.buffers()[2], np.uint8), value_offsets,
                      np.concatenate(deletes))
    layout = _layout(index, 1 << 62, restart_interval=1, values_of_deletes=True)
    joined = _entries(index, layout).buffers()[2]
    return bytes(joined)[:-1]  # the type byte is the trailer's


def _block(entries: list[tuple[bytes, bytes]], restart_every: int) -> bytes:
    """A small block (index, properties, metaindex) built in Python: entries whole."""
    parts: list[bytes] = []
    restarts: list[int] = []
    size = 0
    for number, (key, value) in enumerate(entries):
        if number % restart_every == 0:
            restarts.append(size)
        entry = b"\x00" + _varint(len(key)) + _varint(len(value)) + key + value
        parts.append(entry)
        size += len(entry)
    parts.append(struct.pack(f"<{len(restarts) + 1}I", *restarts, len(restarts)))
    return b"".join(parts)


def _trailer(block: bytes) -> bytes:
    import google_crc32c

    return NO_COMPRESSION + _masked(google_crc32c.value(block + NO_COMPRESSION)).to_bytes(
        4, "little")


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _handle(offset: int, size: int) -> bytes:
    return _varint(offset) + _varint(size)


def _session_id() -> str:
    """20 base-36 digits, as RocksDB names a session: with the file number it makes the
    file's unique id (block cache keys), so every table gets a fresh random one."""
    number = uuid.uuid4().int % 36**20
    digits = []
    for _ in range(20):
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits))


def _properties(stats: TableStats, data_size: int, index_size: int, raw_key_size: int,
                raw_value_size: int) -> list[tuple[bytes, bytes]]:
    numbers = {
        "rocksdb.column.family.id": UNKNOWN_COLUMN_FAMILY,
        "rocksdb.creation.time": 0,
        "rocksdb.data.size": data_size,
        "rocksdb.deleted.keys": stats.deletes,
        "rocksdb.filter.size": 0,
        "rocksdb.fixed.key.length": 0,
        "rocksdb.format.version": FORMAT_VERSION,
        "rocksdb.index.key.is.user.key": 0,
        "rocksdb.index.size": index_size,
        "rocksdb.index.value.is.delta.encoded": 0,
        "rocksdb.key.largest.seqno": 0,
        "rocksdb.merge.operands": 0,
        "rocksdb.num.data.blocks": stats.data_blocks,
        "rocksdb.num.entries": stats.entries,
        "rocksdb.num.filter_entries": 0,
        "rocksdb.num.range-deletions": 0,
        "rocksdb.oldest.key.time": 0,
        "rocksdb.original.file.number": 1,
        "rocksdb.raw.key.size": raw_key_size,
        "rocksdb.raw.value.size": raw_value_size,
        "rocksdb.tail.start.offset": data_size,
    }
    texts = {
        "rocksdb.block.based.table.index.type": struct.pack("<I", 0),  # binary search
        "rocksdb.block.based.table.prefix.filtering": b"0",
        "rocksdb.block.based.table.whole.key.filtering": b"1",
        "rocksdb.comparator": b"leveldb.BytewiseComparator",
        "rocksdb.compression": b"NoCompression",
        "rocksdb.creating.db.identity": b"SST Writer",
        "rocksdb.creating.host.identity": b"pyspark-dstl",
        "rocksdb.creating.session.identity": _session_id().encode(),
        "rocksdb.external_sst_file.global_seqno": struct.pack("<Q", 0),
        "rocksdb.external_sst_file.version": struct.pack("<I", 2),
        "rocksdb.merge.operator": b"nullptr",
        "rocksdb.prefix.extractor.name": b"nullptr",
        "rocksdb.property.collectors": b"[]",
    }
    merged = {name.encode(): _varint(value) for name, value in numbers.items()}
    merged.update((name.encode(), value) for name, value in texts.items())
    return sorted(merged.items())
