"""The columnar change payload (payload version 2): a change set as packed buffers.

Version 1 (records.py) is one msgpack list with a record per write, so writing and replaying it
costs a Python call per record. Version 2 holds, per column family, the ops as one byte array and
the keys and values as one byte buffer each with their offsets, so it is written from the
transaction cache with a few joins and numpy passes, and read with numpy views that replay sorts
and deduplicates without a Python call per record (lineage/latest.py).

Layout (integers little-endian; docs/formats.md has the table):

    0xC1 0x02                      magic byte (never a msgpack byte), payload version 2
    u64 version, u32 len + utf-8 unique_id, u8 has_base [, u32 len + utf-8 base_unique_id]
    u32 number of blocks, then per block:
      u16 len + utf-8 column family, u32 count n, n x u8 ops (1 put, 2 delete),
      (n + 1) x u32 key offsets, key bytes, (n + 1) x u32 value offsets, value bytes

Every size is checked against the bytes that are left before anything is allocated from it,
and offsets must start at 0, never decrease and end at their buffer's length.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat

import numpy as np

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, StoreIdError
from pyspark_dstl.backend.engines.records import (
    OP_DELETE,
    OP_PUT,
    VersionMarker,
    check_cf,
    decode_writes,
)

MAGIC = 0xC1  # msgpack never uses this byte: a version-1 payload cannot start with it
PAYLOAD_VERSION = 2
MAX_BUFFER = 2**32 - 1  # u32 offsets: a block's keys, or its values, stay below 4 GiB
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_OFFSETS = np.dtype("<u4")


@dataclass(frozen=True, eq=False)
class ColumnBlock:
    """The writes of one column family in one payload, in order: ops[i] applies keys[i]
    (bytes key_offsets[i]:key_offsets[i + 1] of `keys`) and its value (a delete's is empty)."""

    cf: str
    ops: np.ndarray  # uint8, OP_PUT or OP_DELETE
    key_offsets: np.ndarray  # n + 1 offsets into `keys`
    keys: bytes | memoryview
    value_offsets: np.ndarray
    values: bytes | memoryview

    def __len__(self) -> int:
        return len(self.ops)

    def key_list(self) -> list[bytes]:
        return _split(self.keys, self.key_offsets)

    def value_list(self) -> list[bytes | None]:
        """Values in order, None for a delete."""
        values: list[bytes | None] = list(_split(self.values, self.value_offsets))
        for index in np.flatnonzero(self.ops == OP_DELETE).tolist():
            values[index] = None
        return values


def is_columnar(payload: bytes | memoryview) -> bool:
    return len(payload) > 0 and payload[0] == MAGIC


# --- encoding ------------------------------------------------------------------------------

def block_of(cf: str, keys: Iterable[bytes], values: Iterable[bytes | None], count: int,
             may_delete: bool = True) -> ColumnBlock:
    """The block of `count` writes (value None: a delete). `keys` and `values` are iterated
    twice each (sequences or dict views); `may_delete=False` promises no None values."""
    check_cf(cf)
    key_data = b"".join(keys)
    key_offsets = _offsets(np.fromiter(map(len, keys), np.int64, count), cf, "keys")
    if may_delete:
        deleted = np.fromiter(map(operator.is_, values, repeat(None)), np.bool_, count)
    if may_delete and deleted.any():
        kept = (~deleted).tolist()
        value_data = b"".join(compress(values, kept))  # type: ignore[arg-type]
        lengths = np.zeros(count, np.int64)
        lengths[~deleted] = np.fromiter(map(len, compress(values, kept)),  # type: ignore[arg-type]
                                        np.int64, count - int(deleted.sum()))
        ops = np.where(deleted, np.uint8(OP_DELETE), np.uint8(OP_PUT)).astype(np.uint8)
    else:
        value_data = b"".join(values)  # type: ignore[arg-type]  # no deletes
        lengths = np.fromiter(map(len, values), np.int64, count)  # type: ignore[arg-type]
        ops = np.full(count, OP_PUT, np.uint8)
    return ColumnBlock(cf, ops, key_offsets, key_data, _offsets(lengths, cf, "values"),
                       value_data)


def block_of_columns(cf: str, keys: Sequence[bytes], values: Sequence[bytes],
                     key_lengths: np.ndarray, value_lengths: np.ndarray) -> ColumnBlock:
    """The block of puts keys[i] -> values[i] whose lengths are known (put_many columns)."""
    check_cf(cf)
    return ColumnBlock(cf, np.full(len(keys), OP_PUT, np.uint8),
                       _offsets(key_lengths, cf, "keys"), b"".join(keys),
                       _offsets(value_lengths, cf, "values"), b"".join(values))


def encode_tables(marker: VersionMarker,
                  tables: Iterable[tuple[str, Mapping[bytes, bytes | None]]],
                  may_delete: Iterable[str] | None = None) -> bytes:
    """The payload of the transaction cache's tables cf -> {key: value, None for a delete}.
    `may_delete`: the only cfs whose tables may hold deletes (None: any may)."""
    return encode_blocks(marker, table_blocks(tables, may_delete))


def table_blocks(tables: Iterable[tuple[str, Mapping[bytes, bytes | None]]],
                 may_delete: Iterable[str] | None = None) -> list[ColumnBlock]:
    """The blocks of the transaction cache's tables cf -> {key: value, None for a delete},
    empty tables left out. `may_delete`: the only cfs whose tables may hold deletes (None:
    any may)."""
    deleting = None if may_delete is None else set(may_delete)
    return [block_of(cf, table, table.values(), len(table), deleting is None or cf in deleting)
            for cf, table in tables if table]


def sorted_puts(block: ColumnBlock, values: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
    """Physical keys (cf prefix + key) in ascending order and their values, for a block of
    puts whose keys all have one length (ValueError otherwise); `values` are the block's
    values as objects, in block order. The keys are built and sorted in numpy: no Python
    call per key (benchmarks/write_path)."""
    count = len(block)
    lengths = np.diff(block.key_offsets)
    width = int(lengths[0]) if count else 0
    if not count or width == 0 or int(lengths.max()) != width or int(lengths.min()) != width:
        raise ValueError(f"column family {block.cf!r}: keys of one non-zero length needed")
    if (block.ops != OP_PUT).any():
        raise ValueError(f"column family {block.cf!r}: a block of puts only needed")
    rows = np.frombuffer(block.keys, np.uint8, count * width).reshape(count, width)
    strings = rows.view(f"S{width}").ravel()  # unsigned bytewise order, one length
    ordered = list(values)
    if count > 1 and not (strings[:-1] < strings[1:]).all():
        order = np.argsort(strings, kind="stable")
        rows = rows[order]
        ordered = list(operator.itemgetter(*order.tolist())(ordered))
    prefix = np.frombuffer(check_cf(block.cf).encode() + b"\x00", np.uint8)
    physical = np.empty((count, len(prefix) + width), np.uint8)
    physical[:, :len(prefix)] = prefix
    physical[:, len(prefix):] = rows
    keys: list[bytes] = physical.view(f"V{physical.shape[1]}").ravel().tolist()
    return keys, ordered


def encode_blocks(marker: VersionMarker, blocks: Sequence[ColumnBlock]) -> bytes:
    parts: list[bytes | memoryview] = [bytes((MAGIC, PAYLOAD_VERSION)),
                                       _U64.pack(marker.version), _string(marker.unique_id, 4)]
    if marker.base_unique_id is None:
        parts.append(b"\x00")
    else:
        parts += [b"\x01", _string(marker.base_unique_id, 4)]
    parts.append(_U32.pack(len(blocks)))
    for block in blocks:
        parts += [_string(block.cf, 2), _U32.pack(len(block)), block.ops.astype(np.uint8).data,
                  block.key_offsets.astype(_OFFSETS).data, block.keys,
                  block.value_offsets.astype(_OFFSETS).data, block.values]
    return b"".join(parts)


def _offsets(lengths: np.ndarray, cf: str, what: str) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > MAX_BUFFER:
        raise StoreIdError(f"column family {cf!r}: one flush holds {int(offsets[-1])} bytes of "
                           f"{what}, more than a change payload block takes ({MAX_BUFFER})")
    return offsets.astype(_OFFSETS)


def _string(text: str, width: int) -> bytes:
    raw = text.encode()
    limit = 2 ** (8 * width) - 1
    if len(raw) > limit:
        raise StoreIdError(f"{text[:40]!r}: longer than {limit} bytes in UTF-8")
    return (_U16 if width == 2 else _U32).pack(len(raw)) + raw


def _split(data: bytes | memoryview, offsets: np.ndarray) -> list[bytes]:
    data = bytes(data)
    bounds = offsets.tolist()
    return list(map(data.__getitem__, map(slice, bounds[:-1], bounds[1:])))


# --- decoding ------------------------------------------------------------------------------

def decode_change_blocks(data: bytes, where: str) -> tuple[VersionMarker, list[ColumnBlock]]:
    """Marker and blocks of a payload of either version (the first byte tells): version 1
    (msgpack, records.py) is regrouped into one block per run of records of one cf."""
    if is_columnar(data):
        return decode_blocks(data, where)
    marker, cfs, keys, values = decode_writes(data, where)
    blocks: list[ColumnBlock] = []
    starts = [0] + [i for i in range(1, len(cfs)) if cfs[i] != cfs[i - 1]]
    for start, stop in zip(starts, [*starts[1:], len(cfs)], strict=True):
        if stop > start:
            blocks.append(block_of(cfs[start], keys[start:stop], values[start:stop],
                                   stop - start))
    return marker, blocks


def decode_blocks(data: bytes, where: str) -> tuple[VersionMarker, list[ColumnBlock]]:
    """Marker and blocks of a version-2 payload; CorruptCheckpointError naming `where` and
    the field for anything out of bounds or inconsistent."""
    reader = _Reader(memoryview(data), where)
    if len(data) < 2 or data[0] != MAGIC:
        raise CorruptCheckpointError(f"{where}: change payload does not start with the "
                                     f"columnar magic byte")
    if data[1] != PAYLOAD_VERSION:
        raise CorruptCheckpointError(f"{where}: change payload version {data[1]} is not "
                                     f"known (this reader knows 1 and {PAYLOAD_VERSION})")
    reader.position = 2
    version = reader.unpack(_U64, "version")
    unique_id = reader.text(_U32, "unique id")
    has_base = reader.take(1, "base flag")[0]
    if has_base not in (0, 1):
        raise CorruptCheckpointError(f"{where}: base flag is {has_base}, not 0 or 1")
    base = reader.text(_U32, "base unique id") if has_base else None
    marker = VersionMarker(version, unique_id, base)
    count = reader.unpack(_U32, "block count")
    blocks = [reader.block(index) for index in range(count)]
    if reader.position != len(data):
        raise CorruptCheckpointError(f"{where}: {len(data) - reader.position} bytes after the "
                                     f"last block")
    return marker, blocks


class _Reader:
    """Bounded reads over a payload: every size is checked against what is left."""

    def __init__(self, data: memoryview, where: str) -> None:
        self.data = data
        self.where = where
        self.position = 0

    def take(self, size: int, field: str) -> memoryview:
        end = self.position + size
        if size < 0 or end > len(self.data):
            raise CorruptCheckpointError(
                f"{self.where}: {field} needs {size} bytes at offset {self.position}, "
                f"{len(self.data) - self.position} left")
        chunk = self.data[self.position:end]
        self.position = end
        return chunk

    def unpack(self, layout: struct.Struct, field: str) -> int:
        value: int = layout.unpack(self.take(layout.size, field))[0]
        return value

    def text(self, length: struct.Struct, field: str) -> str:
        raw = self.take(self.unpack(length, f"{field} length"), field)
        try:
            return bytes(raw).decode()
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"{self.where}: {field} is not UTF-8: {exc}") from exc

    def block(self, index: int) -> ColumnBlock:
        field = f"block {index}"
        cf = self.text(_U16, f"{field} column family")
        try:
            check_cf(cf)
        except StoreIdError as exc:
            raise CorruptCheckpointError(f"{self.where}: {field}: {exc}") from exc
        field = f"block {index} ({cf!r})"
        count = self.unpack(_U32, f"{field} count")
        # ops and two offset arrays must fit in what is left before any is read
        needed = count + 2 * 4 * (count + 1)
        if needed > len(self.data) - self.position:
            raise CorruptCheckpointError(
                f"{self.where}: {field} count {count} needs at least {needed} bytes, "
                f"{len(self.data) - self.position} left")
        ops = np.frombuffer(self.take(count, f"{field} ops"), np.uint8)
        bad = np.flatnonzero((ops != OP_PUT) & (ops != OP_DELETE))
        if len(bad):
            raise CorruptCheckpointError(f"{self.where}: {field} record {int(bad[0])} has "
                                         f"unknown op {int(ops[bad[0]])}")
        key_offsets, keys = self.buffer(count, f"{field} keys")
        value_offsets, values = self.buffer(count, f"{field} values")
        deleted = ops == OP_DELETE
        if deleted.any():
            sized = np.flatnonzero(deleted & (np.diff(value_offsets) != 0))
            if len(sized):
                raise CorruptCheckpointError(f"{self.where}: {field} record {int(sized[0])} "
                                             f"is a delete with a value")
        return ColumnBlock(cf, ops, key_offsets, keys, value_offsets, values)

    def buffer(self, count: int, field: str) -> tuple[np.ndarray, memoryview]:
        offsets = np.frombuffer(self.take(4 * (count + 1), f"{field} offsets"), _OFFSETS)
        if offsets[0] != 0:
            raise CorruptCheckpointError(f"{self.where}: {field} offsets start at "
                                         f"{int(offsets[0])}, not 0")
        falling = np.flatnonzero(offsets[1:] < offsets[:-1])
        if len(falling):
            raise CorruptCheckpointError(f"{self.where}: {field} offset {int(falling[0]) + 1} "
                                         f"is below the one before")
        return offsets, self.take(int(offsets[-1]), f"{field} bytes")
