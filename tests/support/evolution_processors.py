"""PySpark processors for tests/spark/codec/test_schema_evolution.py: one processor shape
whose state schemas change from release to release, as a processor's do.

`StateProbe` keeps a value state, a list state and a map state per user. For every key of a
batch it first reports what it reads (as JSON, in plain types: nested Rows as objects, decimals
as strings), then writes new values made by `make(v)` from the batch's sum of `v`. A "release"
is a subclass that sets the schemas and `make`; `rows` and `pandas` give the Row-based and the
pandas flavour of a release."""

from __future__ import annotations

import decimal
import json
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import StructType, _parse_datatype_string

OUTPUT = "user string, seen string"
INPUT = "user string, v long"


def plain(value: Any) -> Any:
    """A read value in JSON's types: Rows as objects, tuples as lists, decimals as strings."""
    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def struct(ddl: str) -> StructType:
    parsed = _parse_datatype_string(ddl)
    assert isinstance(parsed, StructType)
    return parsed


class StateProbe(StatefulProcessor):
    VALUE: StructType | str = "id int, name string"
    ENTRY: StructType | str = "n int"
    MAP_KEY: StructType | str = "item string"
    MAP_VALUE: StructType | str = "count int"
    VALUE_TTL_MS: int | None = None
    KIND = "value"  # the kind "value" is declared with: a release may change it
    ONLY_VALUE = False  # declare the value state alone
    OUTPUT = OUTPUT

    @staticmethod
    def make(v: int) -> tuple[Any, Any, Any]:
        """(value, list element, map value) written for a batch's sum `v`."""
        return (v, f"name-{v}"), (v,), (v,)

    def init(self, handle: Any) -> None:
        if self.KIND == "list":
            self.value = handle.getListState("value", self.VALUE)
        else:
            self.value = handle.getValueState("value", self.VALUE, self.VALUE_TTL_MS)
        if not self.ONLY_VALUE:
            self.items = handle.getListState("items", self.ENTRY)
            self.by_item = handle.getMapState("by_item", self.MAP_KEY, self.MAP_VALUE)

    def _step(self, key: Any, total: int) -> str:
        seen: dict[str, Any] = {
            "value": plain(self.value.get()) if self.value.exists() else None}
        value, element, entry = self.make(total)
        self.value.update(value)
        if not self.ONLY_VALUE:
            seen["items"] = [plain(e) for e in self.items.get()]
            seen["map"] = sorted([plain(k), plain(v)] for k, v in self.by_item.iterator())
            self.items.appendValue(element)
            self.by_item.updateValue((f"k{total}",), entry)
        return json.dumps(seen, sort_keys=True)

    def close(self) -> None:
        pass


class RowsProbe(StateProbe):
    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Row]:
        total = sum(int(row.v) for row in rows)
        yield Row(user=key[0], seen=self._step(key, total))


class PandasProbe(StateProbe):
    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
        total = sum(int(frame["v"].sum()) for frame in rows)
        yield pd.DataFrame({"user": [key[0]], "seen": [self._step(key, total)]})


def release(name: str, rows_as: str, **attributes: Any) -> StateProbe:
    """An instance of a release: the probe with these class attributes, Row or pandas."""
    base = RowsProbe if rows_as == "rows" else PandasProbe
    for schema in ("VALUE", "ENTRY", "MAP_KEY", "MAP_VALUE"):
        if isinstance(attributes.get(schema), str):
            attributes[schema] = struct(attributes[schema])
    maker: Callable[[int], tuple[Any, Any, Any]] | None = attributes.pop("make", None)
    if maker is not None:
        attributes["make"] = staticmethod(maker)
    cls = type(f"{name}_{rows_as}", (base,), attributes)
    return cls()  # type: ignore[no-any-return]
