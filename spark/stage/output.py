"""Collects what a processor yields and turns it into Arrow batches of the output schema.

Frames are concatenated once and tuples are transposed once at the end, so emitting one row
per key costs a tuple, not a pandas frame.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa

from pyspark_dstl.spark.spark_errors import OutputSchemaError


class OutputCollector:
    def __init__(self, schema: pa.Schema, processor_name: str) -> None:
        self._schema = schema
        self._width = len(schema)
        self._name = processor_name
        self._frames: list[pd.DataFrame] = []
        self._tables: list[pa.Table] = []
        self._rows: list[tuple[Any, ...]] = []

    def add(self, item: Any) -> None:
        if isinstance(item, tuple):
            if len(item) != self._width:
                raise OutputSchemaError(f"{self._name} yielded a row of {len(item)} values; "
                                        f"the output schema has {len(self._schema)} columns "
                                        f"({', '.join(self._schema.names)})")
            self._rows.append(item)
        elif isinstance(item, pd.DataFrame):
            if len(item):
                self._frames.append(item)
        elif isinstance(item, pa.RecordBatch | pa.Table):
            if item.num_rows:
                self._tables.append(self._conform(pa.Table.from_batches([item])
                                                  if isinstance(item, pa.RecordBatch)
                                                  else item))
        elif item is not None:
            raise OutputSchemaError(f"{self._name} yielded a {type(item).__name__}; yield "
                                    f"pandas DataFrames, Arrow batches or tuples (one row)")

    def finish(self) -> pa.Table:
        """Everything yielded so far as one table of the output schema."""
        tables = list(self._tables)
        if self._frames:
            frame = (self._frames[0] if len(self._frames) == 1
                     else pd.concat(self._frames, ignore_index=True, copy=False))
            tables.append(self._from_pandas(frame))
        if self._rows:
            tables.append(self._from_rows(self._rows))
        self._frames, self._tables, self._rows = [], [], []
        if not tables:
            return self._schema.empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _from_pandas(self, frame: pd.DataFrame) -> pa.Table:
        missing = [name for name in self._schema.names if name not in frame.columns]
        if missing:
            raise OutputSchemaError(f"{self._name} yielded frames without column(s) "
                                    f"{', '.join(missing)} of the output schema")
        try:
            return pa.Table.from_pandas(frame[self._schema.names], schema=self._schema,
                                        preserve_index=False, safe=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            for field in self._schema:
                try:
                    pa.Array.from_pandas(frame[field.name], type=field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError,
                        OverflowError) as column_error:
                    raise self._misfit(field, frame[field.name].tolist(),
                                       column_error) from exc
            raise OutputSchemaError(f"{self._name}: output frames do not fit the output "
                                    f"schema ({self._schema_text()}): {exc}") from exc

    def _from_rows(self, rows: list[tuple[Any, ...]]) -> pa.Table:
        columns = list(zip(*rows, strict=True))
        arrays = []
        for column, field in zip(columns, self._schema, strict=True):
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError,
                    OverflowError) as exc:
                raise self._misfit(field, column, exc) from exc
        return pa.Table.from_arrays(arrays, schema=self._schema)

    def _misfit(self, field: pa.Field, values: Any, error: Exception) -> OutputSchemaError:
        """The error naming the output column first, then the first value it cannot hold."""
        bad: Any = None
        for value in values:
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                bad = value
                break
        what = f" cannot hold {bad!r} ({type(bad).__name__})" if bad is not None else \
            " does not fit"
        return OutputSchemaError(f"{self._name}: output column {field.name!r} ({field.type})"
                                 f"{what}: {error} (output schema: {self._schema_text()})")

    def _schema_text(self) -> str:
        return ", ".join(f"{f.name} {f.type}" for f in self._schema)

    def _conform(self, table: pa.Table) -> pa.Table:
        try:
            return table.select(self._schema.names).cast(self._schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
            for field in self._schema:
                if field.name not in table.column_names:
                    raise OutputSchemaError(f"{self._name}: output Arrow data has no column "
                                            f"{field.name!r} (output schema: "
                                            f"{self._schema_text()})") from exc
                try:
                    table.column(field.name).cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as column_error:
                    raise OutputSchemaError(
                        f"{self._name}: output column {field.name!r} "
                        f"({table.schema.field(field.name).type}) cannot be cast to "
                        f"{field.type}: {column_error} (output schema: "
                        f"{self._schema_text()})") from exc
            raise OutputSchemaError(f"{self._name}: output Arrow data does not fit the output "
                                    f"schema ({self._schema_text()}): {exc}") from exc
