"""State values with a Spark schema (PySpark's StructType state): tuples in, tuples out.

A value is stored as a msgpack array with one element per field, each encoded to something
msgpack keeps exactly: timestamps as epoch microseconds, dates as epoch days, decimals as
their exact decimal string (rounded half up to the field's scale), floats rounded to 32 bits,
nested structs as arrays, maps as arrays of [key, value] pairs. Reading decodes back to the
Python values PySpark returns: `datetime`, `date`, `Decimal`, `bytes`, a `Row` for a nested
struct, a plain tuple at the top.

Time follows PySpark's state client: a naive datetime in a TIMESTAMP field is local time of
the Python process and comes back as a naive local datetime (an aware one is converted
exactly); TIMESTAMP_NTZ keeps the wall clock. A value that does not fit its schema raises
StateEncodingError naming the state variable and the field first.
"""

from __future__ import annotations

import calendar
import datetime as dt
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import numpy as np
import pandas as pd

from pyspark_dstl.spark.codec.values import encode_value
from pyspark_dstl.spark.spark_errors import (
    DstlSparkError,
    StateDecodingError,
    StateEncodingError,
    StateVariableError,
)

Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_FLOAT32 = struct.Struct("<f")
_MICROS = 1_000_000
_INTEGER_RANGES = {"byte": 8, "short": 16, "integer": 32, "long": 64}


class _Misfit(DstlSparkError):
    """A value that does not fit its field; `path` is filled in on the way up. Never leaves
    this module: RowCodec turns it into a StateEncodingError naming the field."""

    def __init__(self, reason: str, value: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.value = value
        self.path: list[str] = []


@dataclass(frozen=True)
class FieldCodec:
    """How one Spark type is stored: `decode` None means the stored value is the value."""

    type_name: str
    encode: Encoder
    decode: Decoder | None = None
    # values of exactly this Python type (and, for integers, within `bounds`) are stored as
    # they are: encoding checks the type and returns the value, the common case in one step
    exact: type | None = None
    bounds: tuple[int, int] | None = None


# ---- scalars --------------------------------------------------------------------------------


def _is_integer(value: Any) -> bool:
    return (isinstance(value, int | np.integer)) and not isinstance(value, bool | np.bool_)


def _is_number(value: Any) -> bool:
    return _is_integer(value) or isinstance(value, float | np.floating)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Misfit("expected a str", value)
    return str(value)


def _binary(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _Misfit("expected bytes", value)
    return bytes(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise _Misfit("expected a bool", value)
    return bool(value)


def _integral_bounds(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _integral(bits: int) -> Encoder:
    low, high = _integral_bounds(bits)

    def encode(value: Any) -> int:
        if not _is_integer(value):
            raise _Misfit("expected an int", value)
        number = int(value)
        if not low <= number <= high:
            raise _Misfit(f"out of range [{low}, {high}]", value)
        return number

    return encode


def _double(value: Any) -> float:
    if not _is_number(value):
        raise _Misfit("expected a float", value)
    return float(value)


def _float32(value: Any) -> float:
    number = _double(value)
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(number))[0])
    except (OverflowError, struct.error) as exc:
        raise _Misfit("out of the 32-bit float range", value) from exc


def _decimal(precision: int, scale: int) -> Encoder:
    step = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (precision - scale)
    context = Context(prec=precision + 1, rounding=ROUND_HALF_UP)

    def encode(value: Any) -> str:
        if isinstance(value, Decimal):
            number = value
        elif _is_integer(value):
            number = Decimal(int(value))
        else:
            raise _Misfit("expected a decimal.Decimal or an int", value)
        try:
            rounded = number.quantize(step, context=context)
        except InvalidOperation as exc:
            raise _Misfit(f"does not fit decimal({precision},{scale})", value) from exc
        if not rounded.is_finite() or abs(rounded) >= limit:
            raise _Misfit(f"does not fit decimal({precision},{scale})", value)
        return format(rounded.copy_abs() if rounded.is_zero() else rounded, "f")

    return encode


def _as_datetime(value: Any) -> Any:
    """pandas and NumPy datetimes as `datetime` (sub-microsecond digits dropped)."""
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime(warn=False)
    if isinstance(value, np.datetime64):
        return pd.Timestamp(value).to_pydatetime(warn=False)
    return value


def _date(value: Any) -> int:
    value = _as_datetime(value)
    if not isinstance(value, dt.date):
        raise _Misfit("expected a datetime.date", value)
    return value.toordinal() - _EPOCH_ORDINAL


def _decode_date(days: int) -> dt.date:
    return dt.date.fromordinal(days + _EPOCH_ORDINAL)


def _timestamp(value: Any) -> int:
    value = _as_datetime(value)
    if not isinstance(value, dt.datetime):
        raise _Misfit("expected a datetime.datetime", value)
    if value.tzinfo is not None and value.utcoffset() is not None:
        seconds = calendar.timegm(value.utctimetuple())
    else:  # naive: local time of this process, as PySpark reads it
        seconds = int(time.mktime(value.timetuple()))
    return seconds * _MICROS + value.microsecond


def _decode_timestamp(micros: int) -> dt.datetime:
    seconds, rest = divmod(micros, _MICROS)
    return dt.datetime.fromtimestamp(seconds).replace(microsecond=rest)


def _timestamp_ntz(value: Any) -> int:
    value = _as_datetime(value)
    if not isinstance(value, dt.datetime):
        raise _Misfit("expected a datetime.datetime", value)
    return calendar.timegm(value.timetuple()) * _MICROS + value.microsecond


def _decode_timestamp_ntz(micros: int) -> dt.datetime:
    return _EPOCH_NAIVE + dt.timedelta(microseconds=micros)


def _interval(value: Any) -> int:
    if isinstance(value, pd.Timedelta | np.timedelta64):
        value = pd.Timedelta(value).to_pytimedelta()
    if not isinstance(value, dt.timedelta):
        raise _Misfit("expected a datetime.timedelta", value)
    return (value.days * 86_400 + value.seconds) * _MICROS + value.microseconds


def _decode_interval(micros: int) -> dt.timedelta:
    return dt.timedelta(microseconds=micros)


def _null(value: Any) -> None:
    raise _Misfit("a NULL field holds only None", value)


# ---- nested types ---------------------------------------------------------------------------


def _nullable(codec: FieldCodec, nullable: bool) -> Encoder:
    encode = codec.encode

    def encode_or_null(value: Any) -> Any:
        if value is None or value is pd.NaT:
            if not nullable:
                raise _Misfit("None in a non-nullable field", value)
            return None
        return encode(value)

    return encode_or_null


def _fast(codec: FieldCodec, nullable: bool) -> Encoder:
    """The field's encoder with its common case first: a value of the codec's exact type
    (in range) is stored as it is; anything else takes the full encoder (None, conversions,
    the _Misfit that names the field)."""
    full = _nullable(codec, nullable)
    exact: Any = codec.exact
    if exact is None:
        return full
    if codec.bounds is not None:
        low, high = codec.bounds

        def bounded(value: Any) -> Any:
            if type(value) is exact and low <= value <= high:
                return value
            return full(value)

        return bounded

    def plain(value: Any) -> Any:
        return value if type(value) is exact else full(value)

    return plain


def _decoding(codec: FieldCodec) -> Decoder:
    decode = codec.decode
    if decode is None:
        return lambda value: value
    return lambda value: None if value is None else decode(value)


def _array(element: FieldCodec, contains_null: bool) -> FieldCodec:
    encode_element = _nullable(element, contains_null)
    decode_element = _decoding(element)

    def encode(value: Any) -> list[Any]:
        if not isinstance(value, list | tuple | np.ndarray):
            raise _Misfit("expected a list", value)
        encoded = []
        for index, item in enumerate(value):
            try:
                encoded.append(encode_element(item))
            except _Misfit as misfit:
                misfit.path.append(f"[{index}]")
                raise
        return encoded

    return FieldCodec(f"array<{element.type_name}>", encode,
                      None if element.decode is None
                      else lambda stored: [decode_element(v) for v in stored])


def _map(key: FieldCodec, value: FieldCodec, value_contains_null: bool) -> FieldCodec:
    encode_key = _nullable(key, False)
    encode_value = _nullable(value, value_contains_null)
    decode_key, decode_value = _decoding(key), _decoding(value)

    def encode(mapping: Any) -> list[list[Any]]:
        if not isinstance(mapping, Mapping):
            raise _Misfit("expected a dict", mapping)
        pairs = []
        for k, v in mapping.items():
            try:
                pairs.append([encode_key(k), encode_value(v)])
            except _Misfit as misfit:
                misfit.path.append(f"[{k!r:.40}]")
                raise
        return pairs

    def decode(stored: list[list[Any]]) -> dict[Any, Any]:
        return {decode_key(k): decode_value(v) for k, v in stored}

    return FieldCodec(f"map<{key.type_name},{value.type_name}>", encode, decode)


class _Fields:
    """The codecs of a struct's fields: encodes a tuple, Row or dict to a list and back."""

    def __init__(self, schema: Any) -> None:
        self.names: list[str] = list(schema.names)
        codecs = [field_codec(f.dataType, f.name) for f in schema.fields]
        self.type_names = [c.type_name for c in codecs]
        self._encoders = [_fast(c, f.nullable) for c, f in zip(codecs, schema.fields,
                                                                strict=True)]
        self._decoders = [(i, _decoding(c)) for i, c in enumerate(codecs)
                          if c.decode is not None]
        self._width = len(self.names)

    def values_of(self, value: Any) -> list[Any]:
        """A dict by field name; a tuple, Row or list by position (as PySpark takes them)."""
        if isinstance(value, Mapping):
            return [value.get(name) for name in self.names]
        if isinstance(value, tuple | list):
            if len(value) != len(self.names):
                raise _Misfit(f"expected {len(self.names)} values ({', '.join(self.names)}) "
                              f"but the {type(value).__name__} has {len(value)}", value)
            return list(value)
        if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
            return self.values_of(tuple(value))  # as PySpark does: tuple(value)
        raise _Misfit(f"expected a tuple of {len(self.names)} values "
                      f"({', '.join(self.names)})", value)

    def encode(self, value: Any) -> list[Any]:
        if isinstance(value, tuple) and len(value) == self._width and \
                not isinstance(value, Mapping):  # a tuple or Row of the right length
            try:
                return [encode(item) for encode, item in zip(self._encoders, value,
                                                              strict=True)]
            except _Misfit:
                pass  # again below, field by field, to name the field
        values = self.values_of(value)
        encoded = []
        for name, encode, item in zip(self.names, self._encoders, values, strict=True):
            try:
                encoded.append(encode(item))
            except _Misfit as misfit:
                misfit.path.append(name)
                raise
        return encoded

    def decode(self, stored: Any) -> list[Any]:
        if not self._decoders and type(stored) is list and len(stored) == self._width:
            return stored  # every field is stored as it is (msgpack gave a fresh list)
        if not isinstance(stored, list | tuple) or len(stored) != len(self.names):
            raise ValueError(f"stored value {stored!r:.80} does not have the schema's "
                             f"{len(self.names)} fields ({', '.join(self.names)}); was it "
                             f"written with another schema?")
        values = list(stored)
        for index, decode in self._decoders:
            values[index] = decode(values[index])
        return values


def _struct(schema: Any) -> FieldCodec:
    from pyspark.sql.types import Row

    fields = _Fields(schema)
    row_class = Row(*fields.names)
    return FieldCodec(f"struct<{','.join(fields.names)}>", fields.encode,
                      lambda stored: row_class(*fields.decode(stored)))


def field_codec(data_type: Any, name: str) -> FieldCodec:
    """The codec of one Spark type; StateVariableError for a type state cannot hold."""
    from pyspark.sql import types as T

    simple = data_type.simpleString()
    if isinstance(data_type, T.StringType | T.CharType | T.VarcharType):
        return FieldCodec(simple, _string, exact=str)
    if isinstance(data_type, T.BinaryType):
        return FieldCodec(simple, _binary, exact=bytes)
    if isinstance(data_type, T.BooleanType):
        return FieldCodec(simple, _boolean, exact=bool)
    if isinstance(data_type, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        bits = _INTEGER_RANGES[data_type.typeName()]
        return FieldCodec(simple, _integral(bits), exact=int, bounds=_integral_bounds(bits))
    if isinstance(data_type, T.FloatType):
        return FieldCodec(simple, _float32)
    if isinstance(data_type, T.DoubleType):
        return FieldCodec(simple, _double, exact=float)
    if isinstance(data_type, T.DecimalType):
        return FieldCodec(simple, _decimal(data_type.precision, data_type.scale), Decimal)
    if isinstance(data_type, T.DateType):
        return FieldCodec(simple, _date, _decode_date)
    if isinstance(data_type, T.TimestampNTZType):
        return FieldCodec(simple, _timestamp_ntz, _decode_timestamp_ntz)
    if isinstance(data_type, T.TimestampType):
        return FieldCodec(simple, _timestamp, _decode_timestamp)
    if isinstance(data_type, T.DayTimeIntervalType):
        return FieldCodec(simple, _interval, _decode_interval)
    if isinstance(data_type, T.NullType):
        return FieldCodec(simple, _null)
    if isinstance(data_type, T.ArrayType):
        return _array(field_codec(data_type.elementType, name), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return _map(field_codec(data_type.keyType, name),
                    field_codec(data_type.valueType, name), data_type.valueContainsNull)
    if isinstance(data_type, T.StructType):
        return _struct(data_type)
    raise StateVariableError(f"field {name!r}: type {simple} cannot be kept in state here "
                             f"(supported: strings, binary, booleans, numbers, decimals, "
                             f"dates, timestamps, day-time intervals, arrays, maps, structs)")


class RowCodec:
    """Encodes the values of one state schema (a StructType); `what` names the state
    variable (and its role, e.g. "map key") in errors."""

    def __init__(self, schema: Any, what: str) -> None:
        from pyspark.sql.types import StructType

        if not isinstance(schema, StructType):
            raise StateVariableError(f"state {what}: the schema must be a StructType or a DDL "
                                     f"string of fields, got {schema!r:.120}")
        self.what = what
        self.schema = schema
        try:
            self._fields = _Fields(schema)
        except StateVariableError as exc:
            raise StateVariableError(f"state {what}: {exc}") from None

    @property
    def names(self) -> list[str]:
        return self._fields.names

    def encode(self, value: Any) -> list[Any]:
        try:
            return self._fields.encode(value)
        except _Misfit as misfit:
            raise StateEncodingError(self._describe(misfit)) from None

    def decode(self, stored: Any) -> tuple[Any, ...]:
        try:
            return tuple(self._fields.decode(stored))
        except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
            raise StateDecodingError(f"state {self.what}: {exc}") from exc

    def encode_bytes(self, value: Any, expires_at_ms: int | None) -> bytes:
        """The stored bytes of `value` with its expiry (None: none)."""
        return encode_value(self.encode(value), expires_at_ms, self.what)

    def decode_bytes(self, raw: bytes) -> tuple[Any, ...] | None:
        """The value of stored bytes when this codec reads them in one step; None leaves
        them to decode() of the stored value (here: always)."""
        return None

    def _describe(self, misfit: _Misfit) -> str:
        value = misfit.value
        shown = f"{value!r:.80} ({type(value).__name__})"
        if not misfit.path:
            return f"state {self.what}: {misfit.reason}, got {shown}"
        path = list(reversed(misfit.path))
        field = path[0] + "".join(p if p.startswith("[") else "." + p for p in path[1:])
        index = self._fields.names.index(path[0])
        return (f"state {self.what}: field {field!r} ({self._fields.type_names[index]}): "
                f"{misfit.reason}, got {shown}")
