"""State values with a Spark schema: stored through msgpack and read back exactly as the tuples
(datetimes, dates, decimals, Rows) PySpark's state returns; a value that does not fit is
refused naming the state variable and the field."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import msgpack
import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Row
from pyspark.sql import types as T

from pyspark_dstl.spark import StateDecodingError, StateEncodingError, StateVariableError
from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.pyspark_api.pyspark_state import SchemaBook


def codec(*fields: tuple[str, Any], nullable: bool = True) -> RowCodec:
    schema = T.StructType([T.StructField(name, kind, nullable) for name, kind in fields])
    return RowCodec(schema, "tally")


def stored(codec: RowCodec, value: Any) -> tuple[Any, ...]:
    """Encode, pack with msgpack as the state store does, unpack and decode."""
    packed = msgpack.packb(codec.encode(value), use_bin_type=True)
    return codec.decode(msgpack.unpackb(packed, raw=False, strict_map_key=False))


ROUND_TRIPS = [
    (T.StringType(), "ä≠"), (T.BinaryType(), b"\x00\xff"), (T.BooleanType(), False),
    (T.ByteType(), -128), (T.ShortType(), 32767), (T.IntegerType(), -(1 << 31)),
    (T.LongType(), (1 << 63) - 1), (T.DoubleType(), -1e300), (T.FloatType(), 0.5),
    (T.DecimalType(38, 18), Decimal("12345678901234567890.123456789012345678")),
    (T.DateType(), dt.date(1, 1, 1)), (T.DateType(), dt.date(9999, 12, 31)),
    (T.TimestampType(), dt.datetime(2024, 3, 31, 2, 30, 0, 999999)),
    (T.TimestampType(), dt.datetime(1950, 6, 1, 0, 0, 0, 1)),
    (T.TimestampNTZType(), dt.datetime(1900, 1, 1, 23, 59, 59, 123456)),
    (T.DayTimeIntervalType(), dt.timedelta(days=-3, microseconds=7)),
    (T.ArrayType(T.LongType()), [1, None, 3]),
    (T.MapType(T.StringType(), T.DateType()), {"a": dt.date(2020, 2, 29), "b": None}),
]


@pytest.mark.parametrize(("kind", "value"), ROUND_TRIPS,
                         ids=[f"{k.simpleString()}-{i}" for i, (k, _) in enumerate(ROUND_TRIPS)])
def test_a_value_comes_back_exactly_as_stored(kind: Any, value: Any) -> None:
    assert stored(codec(("v", kind)), (value,)) == (value,)
    assert type(stored(codec(("v", kind)), (value,))[0]) is type(value)


def test_a_nested_struct_comes_back_as_a_row() -> None:
    inner = T.StructType([T.StructField("at", T.TimestampType()),
                          T.StructField("tags", T.ArrayType(T.StringType()))])
    value = (dt.datetime(2024, 1, 2, 3, 4, 5), ["x", "y"])
    [back] = stored(codec(("inner", inner)), (value,))
    assert isinstance(back, Row)
    assert back.asDict() == {"at": value[0], "tags": value[1]}


def test_an_aware_timestamp_is_the_same_instant_read_back_as_naive_local_time() -> None:
    aware = dt.datetime(2024, 7, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    [back] = stored(codec(("at", T.TimestampType())), (aware,))
    assert back.tzinfo is None
    assert back.astimezone() == aware


def test_a_timestamp_ntz_keeps_the_wall_clock_of_an_aware_datetime() -> None:
    aware = dt.datetime(2024, 7, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert stored(codec(("at", T.TimestampNTZType())), (aware,)) == (
        dt.datetime(2024, 7, 1, 12, 0),)


def test_pandas_and_numpy_values_are_stored_as_their_python_values() -> None:
    row = codec(("at", T.TimestampType()), ("day", T.DateType()), ("n", T.LongType()),
                ("x", T.DoubleType()), ("flag", T.BooleanType()))
    value = (pd.Timestamp("2024-01-01 10:00:00.000001"), np.datetime64("2024-01-02"),
             np.int32(7), np.float32(0.25), np.bool_(True))
    assert stored(row, value) == (dt.datetime(2024, 1, 1, 10, 0, 0, 1), dt.date(2024, 1, 2), 7,
                                  0.25, True)


def test_a_decimal_is_rounded_half_up_to_its_scale() -> None:
    assert stored(codec(("d", T.DecimalType(5, 2))), (Decimal("1.005"),)) == (Decimal("1.01"),)
    assert stored(codec(("d", T.DecimalType(5, 2))), (3,)) == (Decimal("3.00"),)


def test_a_float_field_keeps_32_bits_as_spark_does() -> None:
    assert stored(codec(("f", T.FloatType())), (0.1,)) == (float(np.float32(0.1)),)


def test_fields_are_taken_by_name_from_a_dict_and_by_position_from_tuples_and_rows() -> None:
    row = codec(("a", T.LongType()), ("b", T.StringType()))
    assert stored(row, {"b": "x", "a": 1}) == (1, "x")
    assert stored(row, Row(first=2, second="y")) == (2, "y")
    assert stored(row, [3, "z"]) == (3, "z")


@pytest.mark.parametrize(("fields", "value", "message"), [
    ((("n", T.LongType()), ("s", T.StringType())), ("many", "x"),
     "state tally: field 'n' (bigint): expected an int, got 'many' (str)"),
    ((("n", T.IntegerType()),), (1 << 31,),
     "state tally: field 'n' (int): out of range [-2147483648, 2147483647], got 2147483648"),
    ((("d", T.DecimalType(4, 2)),), (Decimal("100"),),
     "state tally: field 'd' (decimal(4,2)): does not fit decimal(4,2)"),
    ((("d", T.DecimalType(4, 2)),), (0.5,),
     "state tally: field 'd' (decimal(4,2)): expected a decimal.Decimal or an int"),
    ((("t", T.TimestampType()),), (dt.date(2024, 1, 1),),
     "state tally: field 't' (timestamp): expected a datetime.datetime"),
    ((("a", T.ArrayType(T.LongType())),), ([1, "x"],),
     "state tally: field 'a[1]' (array<bigint>): expected an int, got 'x'"),
    ((("a", T.LongType()), ("b", T.LongType())), (1,),
     "state tally: expected 2 values (a, b) but the tuple has 1"),
    ((("a", T.LongType()),), 5, "state tally: expected a tuple of 1 values (a), got 5"),
])
def test_a_value_that_does_not_fit_names_the_state_and_the_field(
        fields: Any, value: Any, message: str) -> None:
    with pytest.raises(StateEncodingError) as raised:
        codec(*fields).encode(value)
    assert str(raised.value).startswith(message)


def test_none_in_a_non_nullable_field_is_refused() -> None:
    with pytest.raises(StateEncodingError, match=r"^state tally: field 'n' \(bigint\): None "
                                                 r"in a non-nullable field"):
        codec(("n", T.LongType()), nullable=False).encode((None,))


def test_a_value_written_with_another_schema_fails_to_decode_naming_the_state() -> None:
    with pytest.raises(StateDecodingError, match=r"^state tally: stored value \[1, 2\] does "
                                                 r"not have the schema's 1 fields \(n\)"):
        codec(("n", T.LongType())).decode([1, 2])


def test_a_type_state_cannot_hold_is_refused_when_declared() -> None:
    with pytest.raises(StateVariableError, match=r"^state tally: field 'v': type interval "
                                                 r"cannot be kept in state"):
        codec(("v", T.CalendarIntervalType()))


def test_a_ddl_schema_the_driver_did_not_parse_is_refused_on_executors() -> None:
    book = SchemaBook({"n long": T.StructType([T.StructField("n", T.LongType())]).json()})
    assert book.struct("n long", "tally").names == ["n"]
    with pytest.raises(StateVariableError, match=r"^state tally: schema 'm long' was not "
                                                 r"declared when init\(\) ran on the driver"):
        book.struct("m long", "tally")


# ---- the common case in one step ------------------------------------------------------------


def test_values_of_the_exact_type_are_stored_as_they_are_and_others_converted() -> None:
    fields = codec(("n", T.LongType()), ("x", T.DoubleType()), ("s", T.StringType()),
                   ("b", T.BooleanType()))
    assert fields.encode((3, 0.5, "a", True)) == [3, 0.5, "a", True]
    assert fields.encode(Row(n=np.int64(3), x=1, s="a", b=np.bool_(False))) == \
        [3, 1.0, "a", False]
    assert type(fields.encode((3, 1, "a", True))[1]) is float


def test_a_bool_in_an_integer_field_is_refused_as_before() -> None:
    with pytest.raises(StateEncodingError, match=r"field 'n' \(bigint\): expected an int"):
        codec(("n", T.LongType())).encode((True,))
