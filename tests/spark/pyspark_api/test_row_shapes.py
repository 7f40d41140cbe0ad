"""transformWithState's Rows as the switch builds and reads them: the input rows are the Rows
PySpark's own `Row(*names)(*values)` makes, and a yielded Row is read by field name."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Row

from pyspark_dstl.spark.pyspark_api.pyspark_rows import ROWS, RowShape


def shape(*output_names: str) -> RowShape:
    return RowShape(rows_as=ROWS, zone="UTC", key_types=("string",), output_names=output_names)


def test_input_rows_are_the_rows_pyspark_makes_from_the_column_names() -> None:
    table = pa.table({"user": ["a", "b", None], "v": [1, 2, 3]})
    made = Row("user", "v")
    rows = shape("user").rows(table)
    assert rows == [made("a", 1), made("b", 2), made(None, 3)]
    assert all(type(row) is Row and row.__fields__ == ("user", "v") for row in rows)
    assert [row.asDict() for row in rows] == [{"user": "a", "v": 1}, {"user": "b", "v": 2},
                                              {"user": None, "v": 3}]
    assert rows[1].user == "b" and rows[1]["v"] == 2


def test_a_yielded_row_in_output_order_gives_its_values() -> None:
    assert shape("user", "count").output_row(Row(user="x", count=3), "P") == ("x", 3)
    assert shape("user", "count").output_row(Row("user", "count")("x", 3), "P") == ("x", 3)


def test_a_yielded_row_in_another_order_or_short_of_a_field_is_read_by_name() -> None:
    assert shape("user", "count").output_row(Row(count=3, user="x"), "P") == ("x", 3)
    assert shape("user", "count").output_row(Row(user="x"), "P") == ("x", None)


def test_a_nested_row_in_a_yielded_row_becomes_a_dict_as_in_pyspark() -> None:
    nested = Row(user="x", detail=Row(a=1), tags=[Row(b=2)])
    assert shape("user", "detail", "tags").output_row(nested, "P") == (
        "x", {"a": 1}, [{"b": 2}])


def test_output_names_given_twice_take_the_last_value_of_that_name() -> None:
    assert shape("n", "n").output_row(Row("n", "n")(1, 2), "P") == (2, 2)


def test_a_plain_tuple_is_taken_in_output_order() -> None:
    assert shape("user", "count").output_row(("x", 3), "P") == ("x", 3)
