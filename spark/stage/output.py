"""Collects what a processor yields and turns it into Arrow batches of the output schema.

Tuples are transposed once at the end, so emitting one row per key costs a tuple, not a pandas
frame; frames (PySpark processors yield one per key) are gathered column by column as they
come, and each column is joined and converted once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pyspark_dstl.spark.spark_errors import OutputSchemaError

_PLAIN = "biufO"  # NumPy kinds a frame's column converts the same alone as in pd.concat
_UNSEEN: Any = object()


def _column_arrays(frame: pd.DataFrame, width: int) -> list[np.ndarray] | None:
    """Each column of `frame` as a NumPy array (views of its blocks); None when a column is
    not held in a NumPy block (an extension dtype) or pandas keeps its columns otherwise."""
    arrays: list[Any] = [None] * width
    try:
        for block in frame._mgr.blocks:
            values = block.values
            if not isinstance(values, np.ndarray) or values.ndim != 2:
                return None
            where = block.mgr_locs.indexer
            positions = range(width)[where] if isinstance(where, slice) else where.tolist()
            for row, position in enumerate(positions):
                arrays[position] = values[row]
    except (AttributeError, TypeError, IndexError):  # another pandas: pd.concat decides
        return None
    return None if any(array is None for array in arrays) else arrays


def _places(labels: tuple[Any, ...], names: Sequence[str]) -> list[int] | None:
    """Where each output column sits among a frame's labels; None when one is missing or a
    label repeats."""
    if len(set(labels)) != len(labels):
        return None
    where = {label: index for index, label in enumerate(labels)}
    found = [where.get(name) for name in names]
    return None if any(index is None for index in found) else found  # type: ignore[return-value]


class _FrameColumns:
    """Frames gathered column by column as they come: a frame's NumPy columns are kept and
    the frame itself is let go at once (a batch's thousands of one-row frames kept alive
    until the end made the garbage collector walk them again and again). Only plain frames
    are gathered (every output column present once, NumPy dtypes of kinds `_PLAIN`, the
    same dtype in every frame); from the first other frame on, frames are kept and pd.concat
    decides as for any frames, with the rows gathered so far as one frame in front, so both
    ways give the same table."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = list(names)
        self._parts: list[list[np.ndarray]] = [[] for _ in self._names]
        self._dtypes: list[Any] = [None] * len(self._names)
        self._places: dict[tuple[Any, ...], list[int] | None] = {}
        self.kept: list[pd.DataFrame] | None = None  # frames kept whole from here on
        self.gathered = 0  # frames gathered as columns

    def add(self, frame: pd.DataFrame) -> None:
        if self.kept is not None:
            self.kept.append(frame)
            return
        arrays = self._plain_columns(frame)
        if arrays is None:
            gathered = self.gathered_frame()
            self.kept = [] if gathered is None else [gathered]
            self.kept.append(frame)
            self._parts = [[] for _ in self._names]
            self.gathered = 0
            return
        for part, array in zip(self._parts, arrays, strict=True):
            part.append(array)
        self.gathered += 1

    def _plain_columns(self, frame: pd.DataFrame) -> list[np.ndarray] | None:
        labels = tuple(frame.columns.tolist())
        place = self._places.get(labels, _UNSEEN)
        if place is _UNSEEN:
            place = self._places[labels] = _places(labels, self._names)
        if place is None:
            return None
        arrays = _column_arrays(frame, len(labels))
        if arrays is None:
            return None
        dtypes = self._dtypes
        picked = []
        for index, position in enumerate(place):
            array = arrays[position]
            if dtypes[index] is not array.dtype:
                if array.dtype.kind not in _PLAIN or \
                        (dtypes[index] is not None and dtypes[index] != array.dtype):
                    return None
                dtypes[index] = array.dtype
            picked.append(array)
        return picked

    def columns(self) -> list[np.ndarray] | None:
        """The gathered output columns, each joined; None when no frame was gathered."""
        if not self.gathered:
            return None
        return [np.concatenate(part) for part in self._parts]

    def gathered_frame(self) -> pd.DataFrame | None:
        columns = self.columns()
        if columns is None:
            return None
        return pd.DataFrame(dict(zip(self._names, columns, strict=True)), copy=False)


class OutputCollector:
    def __init__(self, schema: pa.Schema, processor_name: str) -> None:
        self._schema = schema
        self._width = len(schema)
        self._name = processor_name
        self._frames = _FrameColumns(schema.names)
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
                self._frames.add(item)
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
        frames = self._frames_table()
        if frames is not None:
            tables.append(frames)
        if self._rows:
            tables.append(self._from_rows(self._rows))
        self._frames, self._tables, self._rows = _FrameColumns(self._schema.names), [], []
        if not tables:
            return self._schema.empty_table()
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _frames_table(self) -> pa.Table | None:
        frames = self._frames
        if frames.kept is not None:
            kept = frames.kept
            return self._from_pandas(kept[0] if len(kept) == 1 else
                                     pd.concat(kept, ignore_index=True, copy=False))
        columns = frames.columns()
        if columns is None:
            return None
        try:
            return pa.Table.from_arrays(
                [pa.array(column, type=field.type, from_pandas=True)
                 for column, field in zip(columns, self._schema, strict=True)],
                schema=self._schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            frame = frames.gathered_frame()  # the frame way raises the error naming the column
            assert frame is not None
            return self._from_pandas(frame)

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
