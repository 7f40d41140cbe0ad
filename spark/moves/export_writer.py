"""The processor an export runs on Spark's own operator: the user's processor declares its state
variables (its init() runs against Spark's handle, so names, schemas and TTLs are exactly the
query's), and the state of this backend, arriving as export records (export_records.py), is
written into them key by key: values with `update`, list elements with `appendList` in their
order, map entries with `updateValue`, timers with `registerTimer`. A timer that fires while
the export runs (none should: export_state.py plans the batches so) is left alone.

It emits a row only for each record of a step the query chains after it (a stored entry of
that step, kind CHAINED_RECORD): that step's `Stager` (chain_export.py) types it into the
staging columns Spark's operator of the step reads; the record writes no state here. The writer
of a chained transformWithState with stateful steps after it passes their staging rows on as
they came (their step column names them), so they reach Spark's operators of those steps
without becoming this step's state.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgpack
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from pyspark_dstl.spark.codec.typed_values import RowCodec
from pyspark_dstl.spark.codec.values import decode_user_key
from pyspark_dstl.spark.moves.export_records import (
    CHAINED_RECORD,
    MAP_KEY,
    POSITION,
    TIMER,
    TIMER_RECORD,
    VALUE,
    VARIABLE,
)
from pyspark_dstl.spark.pyspark_api.pyspark_state import SchemaBook


class CapturingHandle:
    """Spark's handle, passed through, keeping each declared variable by name."""

    def __init__(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self.variables: dict[str, Any] = {}

    def getValueState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None
                      ) -> Any:
        state = self._handle.getValueState(stateName, schema, ttlDurationMs)
        self.variables[stateName] = state
        return state

    def getListState(self, stateName: str, schema: Any, ttlDurationMs: int | None = None
                     ) -> Any:
        state = self._handle.getListState(stateName, schema, ttlDurationMs)
        self.variables[stateName] = state
        return state

    def getMapState(self, stateName: str, userKeySchema: Any, valueSchema: Any,
                    ttlDurationMs: int | None = None) -> Any:
        state = self._handle.getMapState(stateName, userKeySchema, valueSchema, ttlDurationMs)
        self.variables[stateName] = state
        return state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


class StateWriter(StatefulProcessor):
    """`variables`: (name, kind) in the order of the records' variable index; `schemas`: the
    parsed schemas of init()'s declarations (names as SchemaBook keeps them);
    `key_schemas`: a map variable's user key schema, by name; `columns`: the input's."""

    def __init__(self, processor: Any, variables: list[tuple[str, str]],
                 schemas: Mapping[str, str], value_schemas: Mapping[str, Any],
                 key_schemas: Mapping[str, Any], rows: bool, columns: list[str],
                 stagers: Mapping[int, Any] | None = None,
                 output_names: Sequence[str] = (), step: int | None = None,
                 integral: Sequence[str] = ()) -> None:
        self.processor = processor
        # a chained step's writer (`step`, its position) with steps after it: the rows of
        # those steps (their step column not `step`) pass on unchanged, as `output_names`
        self.step = step
        self.integral = frozenset(integral)  # passed columns of integers (pandas: floats)
        self.stagers = dict(stagers or {})  # chained step -> its Stager (chain_export.py)
        self.output_names = list(output_names)  # step column, then every stager's columns
        self.columns = list(columns)  # the input's columns, in order
        self.variables = list(variables)
        self.schemas = dict(schemas)
        self.value_schemas = dict(value_schemas)
        self.key_schemas = dict(key_schemas)
        self.rows = rows

    def init(self, handle: StatefulProcessorHandle) -> None:
        capturing = CapturingHandle(handle)
        self.processor.init(capturing)
        self.handle = handle
        self.state = capturing.variables
        book = SchemaBook(self.schemas)
        self.values = {name: RowCodec(book.struct(self.value_schemas[name], name), name)
                       for name, _ in self.variables}
        self.keys = {name: RowCodec(book.struct(schema, f"{name} (map key)"),
                                    f"{name} (map key)")
                     for name, schema in self.key_schemas.items()}

    def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
        records = list(self._records(rows))
        staged: list[tuple[Any, ...]] = []
        if self.step is not None and self.output_names:
            staged = [tuple(self._passed(r[name], name) for name in self.output_names)
                      for r in records if r[self.output_names[0]] != self.step]
            records = [r for r in records if r[self.output_names[0]] == self.step]
        records.sort(key=lambda r: (r[VARIABLE], r[POSITION] or 0))
        lists: dict[str, list[Any]] = {}
        for record in records:
            index = int(record[VARIABLE])
            if index == CHAINED_RECORD:
                staged.append(self._staged(int(record[POSITION]), record))
                continue
            if index == TIMER_RECORD:
                self.handle.registerTimer(int(record[TIMER]))
                continue
            name, kind = self.variables[index]
            value = self.values[name].decode(msgpack.unpackb(record[VALUE], raw=False))
            if kind == "value":
                self.state[name].update(value)
            elif kind == "list":
                lists.setdefault(name, []).append(value)
            else:
                user_key = self.keys[name].decode(decode_user_key(record[MAP_KEY], name))
                self.state[name].updateValue(user_key, value)
        for name, elements in lists.items():
            self.state[name].appendList(elements)
        return self._emitted(staged)

    def _passed(self, value: Any, name: str) -> Any:
        """A passed value as it came: pandas hands an integer column with nulls over as
        floats."""
        if value is None or name not in self.integral:
            return value
        return int(value)

    def _staged(self, step: int, record: Mapping[str, Any]) -> tuple[Any, ...]:
        """A chained step's record as a full staging row: its columns, None elsewhere."""
        row: list[Any] = [step]
        for position, stager in sorted(self.stagers.items()):
            if position == step:
                row.extend(stager.row(bytes(record[MAP_KEY]), bytes(record[VALUE])))
            else:
                row.extend([None] * len(stager.fields))
        return tuple(row)

    def _emitted(self, staged: list[tuple[Any, ...]]) -> Iterator[Any]:
        if not staged:
            return iter(())
        if self.rows:
            from pyspark.sql import Row

            shape = Row(*self.output_names)
            return iter([shape(*values) for values in staged])
        import pandas as pd

        columns = list(zip(*staged, strict=True))
        return iter([pd.DataFrame({name: pd.Series(list(values), dtype=object)
                                   for name, values in zip(self.output_names, columns,
                                                           strict=True)})])

    def _records(self, rows: Any) -> Iterator[dict[str, Any]]:
        """Rows (transformWithState) or pandas frames (transformWithStateInPandas) as dicts
        of the input's columns, taken by position (PySpark may hand columns whose names start
        with two underscores over as `_1`, `_2`, ...), pandas' missing numbers as None."""
        names = self.columns
        if self.rows:
            for row in rows:
                yield dict(zip(names, tuple(row), strict=True))
            return
        import pandas as pd

        for frame in rows:
            for values in frame.itertuples(index=False, name=None):
                yield {k: (None if _missing(v, pd) else v)
                       for k, v in zip(names, values, strict=True)}

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                           ) -> Iterator[Any]:
        return iter(())

    def close(self) -> None:
        self.processor.close()


def _missing(value: Any, pd: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # bytes and other values that are not scalars to pandas
        return False
