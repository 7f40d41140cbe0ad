"""Schema-typed state across schema changes: which changes keep old values readable, and how
an old value is read under the current schema.

Every value the compat path writes carries the id of the schema it was written with (msgpack
extension type 4: the id as a msgpack integer, then the packed fields), and is decoded with
exactly that schema: a value is never reinterpreted positionally under another one. A value
written before ids existed (a plain msgpack array) has id 0. Reading an older id projects the
stored fields onto the current schema by name: a field the writer did not have reads as null,
a field the reader dropped is skipped, a widened number is converted exactly. Projection works
on the stored form (rows.py's encodings), so the current schema's own decoder does the rest.

`value_change_problems` decides whether a change is allowed (the rules table is in
docs/operations.md, "Changing a processor"); the driver refuses a start on the first problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from pyspark_dstl.spark.codec.typed_values import RowCodec, field_codec
from pyspark_dstl.spark.codec.values import (
    SCHEMA_EXT_CODE,
    encode_value,
    ext_data,
    pack_ext,
    pack_plain,
)
from pyspark_dstl.spark.spark_errors import StateDecodingError

Projector = Callable[[Any], Any]

_INTEGRAL_RANK = {"byte": 0, "short": 1, "integer": 2, "long": 3}
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 19}


@dataclass(frozen=True)
class Problem:
    """One refused change: where (a field path, "" for the whole value), the old and new
    type, and why."""

    field: str
    old: str
    new: str
    reason: str


# ---- the rules ------------------------------------------------------------------------------


def value_change_problems(old: Any, new: Any) -> list[Problem]:
    """Why values written with the StructType `old` cannot be read under `new` (empty: they
    can). Fields match by name; nested structs, array elements and map values follow the
    same rules."""
    problems: list[Problem] = []
    _compare_struct(old, new, "", problems)
    return problems


def _compare_struct(old: Any, new: Any, path: str, problems: list[Problem]) -> None:
    before = {f.name: f for f in old.fields}
    for field in new.fields:
        where = f"{path}.{field.name}" if path else field.name
        previous = before.get(field.name)
        if previous is None:
            if not field.nullable:
                problems.append(Problem(where, "(absent)", _shown(field.dataType),
                                        "added as non-nullable, but values written before "
                                        "have no value for it; declare it nullable"))
            continue
        if previous.nullable and not field.nullable:
            problems.append(Problem(where, _shown(previous.dataType) + " (nullable)",
                                    _shown(field.dataType) + " (not nullable)",
                                    "made non-nullable, but stored values may hold null; "
                                    "keep it nullable"))
        _compare_type(previous.dataType, field.dataType, where, problems)


def _compare_type(old: Any, new: Any, path: str, problems: list[Problem]) -> None:
    from pyspark.sql import types as T

    if isinstance(old, T.StructType) and isinstance(new, T.StructType):
        _compare_struct(old, new, path, problems)
        return
    if isinstance(old, T.ArrayType) and isinstance(new, T.ArrayType):
        if old.containsNull and not new.containsNull:
            problems.append(Problem(path, _shown(old), _shown(new),
                                    "elements made non-nullable; keep containsNull"))
        _compare_type(old.elementType, new.elementType, path + "[]", problems)
        return
    if isinstance(old, T.MapType) and isinstance(new, T.MapType):
        if old.valueContainsNull and not new.valueContainsNull:
            problems.append(Problem(path, _shown(old), _shown(new),
                                    "map values made non-nullable; keep valueContainsNull"))
        if old.keyType != new.keyType:
            problems.append(Problem(path + "{key}", _shown(old.keyType), _shown(new.keyType),
                                    "map keys cannot change type; keep the old key type"))
        _compare_type(old.valueType, new.valueType, path + "{value}", problems)
        return
    reason = _scalar_change(old, new)
    if reason is not None:
        problems.append(Problem(path, _shown(old), _shown(new), reason))


def _scalar_change(old: Any, new: Any) -> str | None:
    """None when every `old` value is exactly a `new` value; else why not."""
    from pyspark.sql import types as T

    if old == new:
        return None
    old_name, new_name = old.typeName(), new.typeName()
    if old_name in _INTEGRAL_RANK and new_name in _INTEGRAL_RANK:
        if _INTEGRAL_RANK[new_name] > _INTEGRAL_RANK[old_name]:
            return None
        return (f"narrowing: {_shown(old)} values may not fit {_shown(new)}; keep "
                f"{_shown(old)} or wider")
    if isinstance(old, T.FloatType) and isinstance(new, T.DoubleType):
        return None
    if isinstance(new, T.DecimalType):
        if old_name in _INTEGRAL_DIGITS:
            digits = _INTEGRAL_DIGITS[old_name]
            if new.precision - new.scale >= digits:
                return None
            return (f"narrowing: {_shown(old)} values need {digits} digits before the point, "
                    f"{_shown(new)} has {new.precision - new.scale}; use decimal("
                    f"{digits + new.scale},{new.scale}) or wider")
        if isinstance(old, T.DecimalType):
            if new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale:
                return None
            return (f"narrowing: {_shown(old)} values may not fit {_shown(new)}; keep the scale "
                    f"and the digits before the point at least as large")
    numbers = (T.FloatType, T.DoubleType, T.DecimalType)
    if (old_name in _INTEGRAL_RANK or isinstance(old, numbers)) and \
            (new_name in _INTEGRAL_RANK or isinstance(new, numbers)):
        return (f"not a widening: {_shown(old)} values are not all exactly {_shown(new)} "
                f"values; keep {_shown(old)} or a wider type of its kind")
    return (f"incompatible type change: stored {_shown(old)} values cannot be read as "
            f"{_shown(new)}; keep {_shown(old)}, or declare a new state variable")


def _shown(data_type: Any) -> str:
    return str(data_type.simpleString())


# ---- reading an older schema's values --------------------------------------------------------


def stored_projector(old: Any, new: Any) -> Projector | None:
    """A function from a value stored under `old` to the same value stored under `new` (None:
    the stored form is the same). Only for changes `value_change_problems` allows."""
    from pyspark.sql import types as T

    if isinstance(old, T.StructType) and isinstance(new, T.StructType):
        return _struct_projector(old, new)
    if isinstance(old, T.ArrayType) and isinstance(new, T.ArrayType):
        element = stored_projector(old.elementType, new.elementType)
        if element is None:
            return None
        return lambda stored: [None if v is None else element(v) for v in stored]
    if isinstance(old, T.MapType) and isinstance(new, T.MapType):
        value = stored_projector(old.valueType, new.valueType)
        if value is None:
            return None
        return lambda stored: [[k, None if v is None else value(v)] for k, v in stored]
    if old == new or (old.typeName() in _INTEGRAL_RANK and new.typeName() in _INTEGRAL_RANK) \
            or (isinstance(old, T.FloatType) and isinstance(new, T.DoubleType)):
        return None  # the stored form is a msgpack int or float either way
    decode = field_codec(old, "").decode
    encode = field_codec(new, "").encode
    if decode is None:
        return encode
    return lambda stored: encode(decode(stored))


def _struct_projector(old: Any, new: Any) -> Projector | None:
    positions = {name: i for i, name in enumerate(old.names)}
    steps: list[tuple[int | None, Projector | None]] = []
    for field in new.fields:
        index = positions.get(field.name)
        step = None if index is None else stored_projector(old.fields[index].dataType,
                                                           field.dataType)
        steps.append((index, step))
    if len(old.fields) == len(new.fields) and all(
            index == i and step is None for i, (index, step) in enumerate(steps)):
        return None

    def project(stored: Any) -> list[Any]:
        out: list[Any] = []
        for index, step in steps:
            if index is None:
                out.append(None)
                continue
            item = stored[index]
            out.append(item if step is None or item is None else step(item))
        return out

    return project


# ---- the codec of a variable with a history ---------------------------------------------------


def tag(schema_id: int, packed_fields: bytes) -> msgpack.ExtType:
    """A stored value: its schema id, then its fields as rows.py packs them."""
    return msgpack.ExtType(SCHEMA_EXT_CODE, msgpack.packb(schema_id) + packed_fields)


def untag(stored: Any, what: str) -> tuple[int, Any]:
    """(schema id, stored fields) of a stored value; a plain array (written before ids) is
    id 0."""
    if not isinstance(stored, msgpack.ExtType):
        return 0, stored
    data = stored.data
    if data and data[0] < 0x80:  # a positive fixint: ids below 128
        schema_id, rest = data[0], data[1:]
    else:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        try:
            schema_id = unpacker.unpack()
        except (ValueError, msgpack.OutOfData, msgpack.FormatError) as exc:
            raise StateDecodingError(f"state {what}: stored value has a damaged schema id: "
                                     f"{exc}") from exc
        rest = data[unpacker.tell():]
        if not isinstance(schema_id, int) or isinstance(schema_id, bool):
            raise StateDecodingError(f"state {what}: stored value has a damaged schema id")
    try:
        fields = msgpack.unpackb(rest, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateDecodingError(f"state {what}: stored value (schema id {schema_id}) is not "
                                 f"valid: {exc}") from exc
    return schema_id, fields


class VersionedRowCodec(RowCodec):
    """A value codec that writes `schema_id` with every value and reads each value with the
    schema its id names (`history`: id -> StructType), projected onto the current one."""

    def __init__(self, schema: Any, what: str, schema_id: int,
                 history: Mapping[int, Any]) -> None:
        super().__init__(schema, what)
        self.schema_id = schema_id
        self._prefix = msgpack.packb(schema_id)
        self._projectors: dict[int, Projector | None] = {}
        for old_id, old in history.items():
            if old_id != schema_id:
                self._projectors[old_id] = stored_projector(old, schema)

    def encode(self, value: Any) -> Any:
        fields = super().encode(value)
        return msgpack.ExtType(SCHEMA_EXT_CODE, self._prefix + pack_plain(fields))

    def encode_bytes(self, value: Any, expires_at_ms: int | None) -> bytes:
        """The stored bytes of `value` (what encode_value(self.encode(value), expiry) gives),
        built in one step when the value does not expire."""
        if expires_at_ms is not None:
            return encode_value(self.encode(value), expires_at_ms, self.what)
        return pack_ext(SCHEMA_EXT_CODE, self._prefix + pack_plain(super().encode(value)))

    def decode_bytes(self, raw: bytes) -> tuple[Any, ...] | None:
        """The value of stored bytes written with the current schema id and no expiry, in
        one step; None for any other stored value (an expiry, another id, a value written
        before ids): decode() of the stored value says what it is."""
        data = ext_data(raw, SCHEMA_EXT_CODE)
        if data is None or not data.startswith(self._prefix):
            return None
        try:
            fields = msgpack.unpackb(data[len(self._prefix):], raw=False,
                                     strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return None  # decode() raises the error that names the variable
        return RowCodec.decode(self, fields)

    def current_fields(self, stored: Any) -> tuple[int, Any]:
        """(the id a stored value was written with, its fields in the current schema's stored
        form)."""
        schema_id, fields = untag(stored, self.what)
        if schema_id != self.schema_id:
            if schema_id not in self._projectors:
                raise StateDecodingError(
                    f"state {self.what}: a stored value has schema id {schema_id}, which the "
                    f"checkpoint's schema history of this variable does not hold (current id "
                    f"{self.schema_id}); it was written by a run this checkpoint did not "
                    f"commit, or by a newer release")
            project = self._projectors[schema_id]
            if project is not None:
                fields = project(fields)
        return schema_id, fields

    def decode(self, stored: Any) -> tuple[Any, ...]:
        return super().decode(self.current_fields(stored)[1])
