"""Change records inside a changelog payload, and the physical key layout in RocksDB.

A payload is one msgpack list: a VERSION marker [3, version, unique_id, base_unique_id] first,
then [1, cf, key, value] puts and [2, cf, key, None] deletes. The marker lets replay check, from
the data itself, that every change set belongs to the expected lineage.
Column families are virtual: the stored key is cf (UTF-8) + b"\\x00" + user key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from backend.errors import CorruptCheckpointError, StoreIdError

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


def check_cf(cf: str) -> str:
    if not isinstance(cf, str) or not cf or "\x00" in cf:
        raise StoreIdError(f"column family name must be a non-empty string without NUL, "
                           f"got {cf!r}")
    return cf


_PREFIXES: dict[str, bytes] = {}


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


def decode_payload(data: bytes, where: str) -> tuple[VersionMarker, list[Record]]:
    """Marker and records of one payload; CorruptCheckpointError naming `where` otherwise."""
    try:
        body = msgpack.unpackb(data, raw=False, use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptCheckpointError(f"{where}: change payload is not msgpack: {exc}") from exc
    if not isinstance(body, list) or not body:
        raise CorruptCheckpointError(f"{where}: change payload is not a non-empty list")
    marker = _marker(body[0], where)
    records: list[Record] = []
    for index, item in enumerate(body[1:], start=1):
        records.append(_record(item, f"{where} record {index}"))
    return marker, records


def _marker(item: Any, where: str) -> VersionMarker:
    if (not isinstance(item, list) or len(item) != 4 or item[0] != OP_VERSION
            or not isinstance(item[1], int) or not isinstance(item[2], str)
            or not (item[3] is None or isinstance(item[3], str))):
        raise CorruptCheckpointError(f"{where}: change payload does not start with a "
                                     f"version marker: {item!r:.80}")
    return VersionMarker(item[1], item[2], item[3])


def _record(item: Any, where: str) -> Record:
    if not isinstance(item, list) or len(item) != 4 or not isinstance(item[1], str) \
            or not isinstance(item[2], bytes):
        raise CorruptCheckpointError(f"{where}: malformed change record {item!r:.80}")
    op, cf, key, value = item
    if op == OP_PUT and isinstance(value, bytes):
        return (OP_PUT, cf, key, value)
    if op == OP_DELETE and value is None:
        return (OP_DELETE, cf, key, None)
    raise CorruptCheckpointError(f"{where}: unknown change record op {op!r}")
