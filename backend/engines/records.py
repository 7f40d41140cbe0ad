"""Change records of payload version 1, the version marker, and the physical key layout.

A version-1 payload is one msgpack list: a VERSION marker [3, version, unique_id,
base_unique_id] first, then [1, cf, key, value] puts and [2, cf, key, None] deletes. Flushes now
write payload version 2 (columns.py); version 1 is decoded here for checkpoints written before
it, and its encoders stay to write such checkpoints in tests. The marker lets replay check,
from the data itself, that every change set belongs to the expected lineage.
Column families are virtual: the stored key is cf (UTF-8) + b"\\x00" + user key.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import msgpack

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, StoreIdError
from pyspark_dstl.core.errors import excerpt

OP_PUT = 1
OP_DELETE = 2
OP_VERSION = 3
CF_SEPARATOR = b"\x00"
DEFAULT_CF = "default"

Record = tuple[int, str, bytes, bytes | None]


@dataclass(frozen=True)
class VersionMarker:
    """The commit a change set belongs to; base_unique_id is None only for version 1."""

    version: int
    unique_id: str
    base_unique_id: str | None


MAX_CF_BYTES = 65535  # a u16 length in payload version 2


def check_cf(cf: str) -> str:
    if not isinstance(cf, str) or not cf or "\x00" in cf:
        raise StoreIdError(f"column family name must be a non-empty string without NUL, "
                           f"got {cf!r}")
    if len(cf) > MAX_CF_BYTES // 4 and len(cf.encode()) > MAX_CF_BYTES:
        raise StoreIdError(f"column family name {cf[:40]!r}...: longer than {MAX_CF_BYTES} "
                           f"bytes in UTF-8")
    return cf


_PREFIXES: dict[str, bytes] = {}


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with `prefix`; None when there is none."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def cf_prefix(cf: str) -> bytes:
    """Cached: every key a store reads, writes or replays needs it (benchmarks/write_path)."""
    prefix = _PREFIXES.get(cf) if type(cf) is str else None
    if prefix is None:
        prefix = check_cf(cf).encode() + CF_SEPARATOR
        if len(_PREFIXES) < 4096:
            _PREFIXES[cf] = prefix
    return prefix


def encode_key(cf: str, key: bytes) -> bytes:
    return cf_prefix(cf) + bytes(key)


def split_key(raw: bytes) -> tuple[str, bytes]:
    cf, sep, key = raw.partition(CF_SEPARATOR)
    if not sep:
        raise CorruptCheckpointError(f"stored key {raw[:40]!r} has no column family prefix")
    return cf.decode(), key


def encode_payload(marker: VersionMarker, records: Iterable[Record]) -> bytes:
    body: list[Any] = [[OP_VERSION, marker.version, marker.unique_id, marker.base_unique_id]]
    body.extend(records)  # (op, cf, key, value) tuples pack exactly like 4-element lists
    return msgpack.packb(body, use_bin_type=True)


def encode_changes(marker: VersionMarker,
                   changes: Iterable[tuple[str, Mapping[bytes, bytes | None]]],
                   may_delete: Container[str] | None = None, packer: Any = None) -> bytes:
    """encode_payload for tables cf -> {key: value, or None for a delete}, puts first, then
    deletes, per cf; keys are unique within a table, so their order does not matter.
    `may_delete`: the only cfs whose tables may hold deletes (None: any may).
    `packer`: a msgpack.Packer(use_bin_type=True, autoreset=False) to reuse; its buffer then
    stays grown from one flush to the next.

    The records never exist as a list: zip makes each (op, cf, key, value) tuple (tuples pack
    like lists) and reuses it once Packer.pack has let go, map and a zero-length deque drive
    the loop in C (benchmarks/write_path: half the cost of packb on a list of records)."""
    changes = list(changes)
    if packer is None:
        packer = new_packer()
    else:
        packer.reset()
    pack = packer.pack
    packer.pack_array_header(1 + sum(len(table) for _, table in changes))
    pack([OP_VERSION, marker.version, marker.unique_id, marker.base_unique_id])
    for cf, table in changes:
        if (may_delete is None or cf in may_delete) and None in table.values():
            puts = {key: value for key, value in table.items() if value is not None}
            deleted = [key for key, value in table.items() if value is None]
            deque(map(pack, zip(repeat(OP_PUT), repeat(cf), puts, puts.values())), 0)
            deque(map(pack, zip(repeat(OP_DELETE), repeat(cf), deleted, repeat(None))), 0)
        else:
            deque(map(pack, zip(repeat(OP_PUT), repeat(cf), table, table.values())), 0)
    payload: bytes = packer.bytes()
    return payload


def new_packer() -> Any:
    """A Packer for encode_changes."""
    return msgpack.Packer(use_bin_type=True, autoreset=False)


def decode_payload(data: bytes, where: str) -> tuple[VersionMarker, list[Record]]:
    """Marker and records of one payload; CorruptCheckpointError naming `where` otherwise."""
    try:
        body = msgpack.unpackb(data, raw=False, use_list=True, ext_hook=_refuse_ext)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptCheckpointError(f"{where}: change payload is not msgpack: "
                                     f"{excerpt(exc)}") from exc
    if not isinstance(body, list) or not body:
        raise CorruptCheckpointError(f"{where}: change payload is not a non-empty list")
    marker = _marker(body[0], where)
    records: list[Record] = []
    for index, item in enumerate(body[1:], start=1):
        records.append(_record(item, f"{where} record {index}"))
    return marker, records


def decode_writes(data: bytes, where: str,
                  ) -> tuple[VersionMarker, Sequence[str], Sequence[bytes], Sequence[bytes | None]]:
    """decode_payload as columns: marker, then cf, key and value (None for a delete) of each
    record in order. Checked with C-level passes over the columns instead of a Python call per
    record (benchmarks/recovery); any payload they do not accept goes through decode_payload,
    so what is accepted, and every error, are exactly decode_payload's."""
    try:
        body = msgpack.unpackb(data, raw=False, use_list=False, ext_hook=_refuse_ext)
    except Exception:  # decode_payload below raises the proper error
        body = None
    if type(body) is tuple and body and _is_marker(body[0]):
        head, records = body[0], body[1:]
        marker = VersionMarker(head[1], head[2], head[3])
        if not records:
            return marker, (), (), ()
        try:
            if set(map(type, records)) == {tuple} and set(map(len, records)) == {4}:
                # itemgetter, not zip(*records): that makes an iterator per record, and the
                # garbage collector's full passes over them cost more than the decoding
                ops, cfs, keys, values = (tuple(map(_FIELDS[i], records)) for i in range(4))
                if (set(map(type, cfs)) == {str} and set(map(type, keys)) == {bytes}
                        and set(zip(ops, map(type, values), strict=True)) <= _PUT_OR_DELETE):
                    return marker, cfs, keys, values
        except TypeError:  # an unhashable op
            pass
    marker, slow = decode_payload(data, where)
    return (marker, [cf for _, cf, _, _ in slow], [key for _, _, key, _ in slow],
            [value for _, _, _, value in slow])


_PUT_OR_DELETE = frozenset({(OP_PUT, bytes), (OP_DELETE, type(None))})
_FIELDS = tuple(operator.itemgetter(i) for i in range(4))


def physical_keys(cfs: Sequence[str], keys: Sequence[bytes]) -> list[bytes]:
    """[encode_key(cf, key) for cf, key in zip(cfs, keys)], one prefix lookup per cf."""
    distinct = set(cfs)
    if len(distinct) == 1:
        return list(map(cf_prefix(cfs[0]).__add__, keys))
    prefixes = {cf: cf_prefix(cf) for cf in distinct}
    return list(map(operator.add, map(prefixes.__getitem__, cfs), keys))


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of a change payload")


def _is_marker(item: Any) -> bool:
    """_marker's test, for a msgpack array decoded as a tuple."""
    return (isinstance(item, tuple) and len(item) == 4 and item[0] == OP_VERSION
            and isinstance(item[1], int) and isinstance(item[2], str)
            and (item[3] is None or isinstance(item[3], str)))


def _marker(item: Any, where: str) -> VersionMarker:
    if (not isinstance(item, list) or len(item) != 4 or item[0] != OP_VERSION
            or not isinstance(item[1], int) or not isinstance(item[2], str)
            or not (item[3] is None or isinstance(item[3], str))):
        raise CorruptCheckpointError(f"{where}: change payload does not start with a "
                                     f"version marker: {excerpt(item, 80)}")
    return VersionMarker(item[1], item[2], item[3])


def _record(item: Any, where: str) -> Record:
    if not isinstance(item, list) or len(item) != 4 or not isinstance(item[1], str) \
            or not isinstance(item[2], bytes):
        raise CorruptCheckpointError(f"{where}: malformed change record {excerpt(item, 80)}")
    op, cf, key, value = item
    if op == OP_PUT and isinstance(value, bytes):
        return (OP_PUT, cf, key, value)
    if op == OP_DELETE and value is None:
        return (OP_DELETE, cf, key, None)
    raise CorruptCheckpointError(f"{where}: unknown change record op {excerpt(op, 80)}")
