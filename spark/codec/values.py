"""msgpack encodings of grouping keys and state values, with an optional expiry per value.

Supported value types: None, bool, int (64-bit), float, str, bytes, and lists/tuples and dicts of
these (tuples come back as lists); NumPy scalars are stored as the matching Python scalar.
Anything else, datetime included, is refused: store an ISO string or epoch number instead, so
the stored bytes never depend on a time zone or a Python class.

A value with a time to live is wrapped in msgpack extension type 1 holding the expiry (epoch
milliseconds, 8 bytes big-endian) followed by the packed value. Keys are the key group
(backend/rescale/key_groups.py: GROUP_WIDTH bytes, big-endian) then a msgpack array of the
grouping columns' values: self-delimiting, so one key's bytes are never a prefix of another's and
map entries can be stored under grouping key + user key and found by a prefix scan. Timestamp
and date grouping keys are extension types 2 (epoch microseconds, UTC) and 3 (epoch days), so
a key's bytes never depend on the reader's time zone. A schema-typed value (the compat path)
is extension type 4, its schema id then its packed fields; it is returned as the ExtType, so a
list state rewritten after an expiry keeps each element's bytes as they were.
"""

from __future__ import annotations

import datetime as dt
import struct
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from pyspark_dstl.backend.rescale.key_groups import GROUP_WIDTH, group_bytes
from pyspark_dstl.spark.spark_errors import StateDecodingError, StateEncodingError

TTL_EXT_CODE = 1
TIMESTAMP_EXT_CODE = 2
DATE_EXT_CODE = 3
SCHEMA_EXT_CODE = 4  # a schema-typed value with its schema id (codec/evolution.py)
_EXPIRY = struct.Struct(">q")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = dt.date(1970, 1, 1)
_ONE_US = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Expiring:
    """A decoded value together with its expiry (epoch milliseconds)."""

    expires_at_ms: int
    value: Any


def _default(obj: Any) -> Any:
    item = getattr(obj, "item", None)
    if item is not None and type(obj).__module__ == "numpy":
        return item()
    raise TypeError(f"cannot store a value of type {type(obj).__name__}")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == SCHEMA_EXT_CODE:  # kept whole: its codec reads the id and the fields
        return msgpack.ExtType(code, data)
    if code != TTL_EXT_CODE or len(data) < _EXPIRY.size:
        raise ValueError(f"unknown msgpack extension type {code}")
    (expires,) = _EXPIRY.unpack_from(data)
    return Expiring(expires, _unpack(data[_EXPIRY.size:]))


class _Packers(threading.local):
    """One msgpack Packer per thread, made once: packb builds a new Packer per call, which
    cost most of a small value's encoding. A Packer returns its buffer and resets after every
    pack, and also when packing fails, so a failed value leaves nothing behind."""

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True, datetime=False, default=_default).pack


_PACKERS = _Packers()


def _pack(value: Any) -> bytes:
    packed: bytes = _PACKERS.pack(value)
    return packed


def pack_plain(value: Any) -> bytes:
    """msgpack bytes of a value of plain types (lists, ints, strings, ...), with this
    thread's Packer: what msgpack.packb(value, use_bin_type=True) gives, without a new
    Packer per call."""
    return _pack(value)


_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def pack_ext(code: int, data: bytes) -> bytes:
    """The bytes msgpack writes for ExtType(code, data), without building the ExtType."""
    size = len(data)
    fixed = _FIXEXT.get(size)
    if fixed is not None:
        head = bytes((fixed, code))
    elif size <= 0xFF:
        head = bytes((0xC7, size, code))
    elif size <= 0xFFFF:
        head = b"\xc8" + size.to_bytes(2, "big") + bytes((code,))
    else:
        head = b"\xc9" + size.to_bytes(4, "big") + bytes((code,))
    return head + data


def ext_data(raw: bytes, code: int) -> bytes | None:
    """The data of `raw` when all of it is one msgpack extension value of type `code`; None
    otherwise (another type, another kind of value, or not a whole value)."""
    try:
        head = raw[0]
        if 0xD4 <= head <= 0xD8:
            size, kind, start = 1 << (head - 0xD4), raw[1], 2
        elif head == 0xC7:
            size, kind, start = raw[1], raw[2], 3
        elif head == 0xC8:
            size, kind, start = int.from_bytes(raw[1:3], "big"), raw[3], 4
        elif head == 0xC9:
            size, kind, start = int.from_bytes(raw[1:5], "big"), raw[5], 6
        else:
            return None
    except IndexError:
        return None
    if kind != code or len(raw) != start + size:
        return None
    return raw[start:]


def timestamp_micros(value: dt.datetime) -> int:
    """Epoch microseconds of a datetime; a naive one is read as UTC (Spark's TIMESTAMP_NTZ)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    return (aware - _EPOCH) // _ONE_US


def _key_default(obj: Any) -> Any:
    """Grouping keys may also hold timestamps and dates (Spark TIMESTAMP, TIMESTAMP_NTZ, DATE)."""
    if isinstance(obj, dt.datetime):
        return msgpack.ExtType(TIMESTAMP_EXT_CODE, _EXPIRY.pack(timestamp_micros(obj)))
    if isinstance(obj, dt.date):
        return msgpack.ExtType(DATE_EXT_CODE, _EXPIRY.pack((obj - _EPOCH_DAY).days))
    stamp = getattr(obj, "to_pydatetime", None)  # pandas.Timestamp
    if stamp is not None:
        return _key_default(stamp())
    return _default(obj)


def _key_ext_hook(code: int, data: bytes) -> Any:
    if code in (TIMESTAMP_EXT_CODE, DATE_EXT_CODE) and len(data) == _EXPIRY.size:
        (number,) = _EXPIRY.unpack(data)
        if code == TIMESTAMP_EXT_CODE:
            return _EPOCH + dt.timedelta(microseconds=number)
        return _EPOCH_DAY + dt.timedelta(days=number)
    return _ext_hook(code, data)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


def encode_value(value: Any, expires_at_ms: int | None, what: str) -> bytes:
    """Bytes of one value; `what` names the state variable in errors."""
    try:
        packed = _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateEncodingError(f"state {what}: {exc} (supported: None, bool, int, float, "
                                 f"str, bytes, list, tuple, dict)") from exc
    if expires_at_ms is None:
        return packed
    return _pack(msgpack.ExtType(TTL_EXT_CODE, _EXPIRY.pack(expires_at_ms) + packed))


def decode_value(data: bytes, now_ms: int, what: str) -> tuple[bool, Any]:
    """(alive, value): alive is False when the value's expiry is at or before `now_ms`."""
    try:
        value = _unpack(data)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored value is not valid: {exc}") from exc
    if isinstance(value, Expiring):
        return value.expires_at_ms > now_ms, value.value
    return True, value


def decode_value_with_expiry(data: bytes, what: str) -> tuple[Any, int | None]:
    """(value, expiry or None), whether or not it has expired; for tools and the reader."""
    try:
        value = _unpack(data)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored value is not valid: {exc}") from exc
    if isinstance(value, Expiring):
        return value.value, value.expires_at_ms
    return value, None


def iter_elements(data: bytes, what: str) -> Iterator[Any]:
    """Each stored element of a concatenation (list state), as Expiring or a plain value."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_ext_hook,
                                max_buffer_size=max(len(data), 1024))
    unpacker.feed(data)
    try:
        yield from unpacker
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored list is not valid: {exc}") from exc


def decode_elements(data: bytes, now_ms: int, what: str) -> tuple[list[Any], bool]:
    """(live elements, whether any element had expired) of a stored list."""
    alive: list[Any] = []
    expired = False
    for element in iter_elements(data, what):
        if isinstance(element, Expiring):
            if element.expires_at_ms > now_ms:
                alive.append(element.value)
            else:
                expired = True
        else:
            alive.append(element)
    return alive, expired


def encode_elements(values: Sequence[Any], expires_at_ms: int | None, what: str) -> bytes:
    return b"".join(encode_value(value, expires_at_ms, what) for value in values)


def pack_key(key: Sequence[Any], what: str = "grouping key") -> bytes:
    """The msgpack array of a grouping key's values (a tuple of column values), without its
    key group: how keys were stored before key groups (the part after the group now)."""
    try:
        return msgpack.packb(list(key), use_bin_type=True, datetime=False, default=_key_default)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateEncodingError(f"{what} {tuple(key)!r:.120}: {exc} (key columns must be "
                                 f"strings, integers, floats, booleans, binary, timestamps or "
                                 f"dates)") from exc


def encode_key(key: Sequence[Any], group: int, what: str = "grouping key") -> bytes:
    """Stored bytes of a grouping key: its key group (`group_bytes`), then `pack_key`."""
    return group_bytes(group) + pack_key(key, what)


def encode_user_key(key: Any, what: str) -> bytes:
    """Bytes of a map state's user key: a scalar or a tuple of scalars (returned as a tuple)."""
    try:
        return _pack(key)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateEncodingError(f"state {what}: map key {key!r:.80}: {exc}") from exc


def decode_user_key(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored map key is not valid: {exc}") from exc


def _strip_group(data: bytes, grouped: bool, what: str) -> bytes:
    if not grouped:
        return data
    if len(data) < GROUP_WIDTH:
        raise StateDecodingError(f"{what}: stored key {data!r} is too short to start with a "
                                 f"key group (was it written before key groups? read it with "
                                 f"grouped=False)")
    return data[GROUP_WIDTH:]


def decode_key(data: bytes, what: str = "grouping key", *, grouped: bool = True
               ) -> tuple[Any, ...]:
    """The values of a stored grouping key; `grouped=False` reads a key without its key group
    (the layout before key groups)."""
    data = _strip_group(data, grouped, what)
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_key_ext_hook)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"{what}: stored key is not valid: {exc}") from exc
    if not isinstance(value, list):
        raise StateDecodingError(f"{what}: stored key is not a msgpack array: {value!r:.80}")
    return tuple(value)


def split_map_key(data: bytes, what: str, *, grouped: bool = True
                  ) -> tuple[tuple[Any, ...], Any]:
    """(grouping key, user key) of a map state's stored key; `grouped` as in `decode_key`."""
    data = _strip_group(data, grouped, f"state {what}")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, use_list=False,
                                ext_hook=_key_ext_hook)
    unpacker.feed(data)
    try:
        group = unpacker.unpack()
        user_key = unpacker.unpack()
    except (ValueError, msgpack.OutOfData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored map key is not valid: {exc}") from exc
    if not isinstance(group, tuple):
        raise StateDecodingError(f"state {what}: stored map key has no grouping key")
    return group, user_key
