"""Rows, keys and outputs in the shapes PySpark's transformWithState hands them over.

transformWithStateInPandas: each key's rows are a pandas DataFrame with a fresh index, integer
columns widened to int64, floats to float64, timestamps as naive wall-clock time of the
session time zone; a timestamp grouping key is a naive `pandas.Timestamp` of that zone.
transformWithState: rows are `pyspark.sql.Row`s and timestamps aware datetimes of the session
time zone. Either way a key is a tuple of the grouping columns' values. Everything is built
once per batch from Arrow, then sliced per key.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.keys.keyed_batch import renumbered_slicer
from pyspark_dstl.spark.spark_errors import OutputSchemaError

PANDAS, ROWS = "pandas", "rows"
_UTC_NAMES = ("UTC", "Etc/UTC", "Z", "+00:00", "GMT")
_NESTED = (tuple, list, dict)  # values Row.asDict(recursive=True) may rebuild


@dataclass(frozen=True)
class RowShape:
    """How one query's rows, keys and outputs look to a PySpark processor."""

    rows_as: str  # PANDAS or ROWS
    zone: str  # spark.sql.session.timeZone
    key_types: tuple[str, ...]  # typeName() of each grouping column
    output_names: tuple[str, ...]
    output_timestamps: tuple[str, ...] = ()  # output columns of type TIMESTAMP
    initial_names: tuple[str, ...] = ()  # the initial state's own columns, in its order
    initial_keys: tuple[str, ...] = ()  # the initial state's grouping columns
    max_records: int = 0  # spark.sql.execution.arrow.maxRecordsPerBatch; 0: no limit
    max_bytes: int = 0  # spark.sql.execution.arrow.maxBytesPerBatch; 0: no limit

    # ---- grouping keys ----------------------------------------------------------------------

    def key_shaper(self) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
        """Turns a key as this backend decodes it into the key PySpark passes."""
        converters = [self._key_converter(t) for t in self.key_types]
        if all(c is None for c in converters):
            return tuple
        pairs = [(i, c) for i, c in enumerate(converters) if c is not None]

        def shape(key: tuple[Any, ...]) -> tuple[Any, ...]:
            values = list(key)
            for index, convert in pairs:
                if values[index] is not None:
                    values[index] = convert(values[index])
            return tuple(values)

        return shape

    def _key_converter(self, type_name: str) -> Callable[[Any], Any] | None:
        zone = tzinfo_of(self.zone)
        if type_name == "timestamp":
            if self.rows_as == PANDAS:
                return lambda v: pd.Timestamp(_aware(v).astimezone(zone).replace(tzinfo=None))
            return lambda v: _aware(v).astimezone(zone)
        if type_name == "timestamp_ntz":
            if self.rows_as == PANDAS:
                return lambda v: pd.Timestamp(v.replace(tzinfo=None))
            return lambda v: v.replace(tzinfo=None)
        return None

    # ---- input rows -------------------------------------------------------------------------

    def rows_by_key(self, table: pa.Table, offsets: np.ndarray,
                    initial: bool = False) -> Callable[[int], Any]:
        """Key i's rows for a table sorted by key: the frames (or the Rows) PySpark would
        hand over, as a list; with `initial`, the initial state's rows (one frame, or the
        Rows) as handleInitialState takes them."""
        if initial:
            table = self._as_initial_state(table)
        bounds = offsets.tolist()
        if self.rows_as == PANDAS:
            frame = self.pandas_frame(table)
            rows_of = renumbered_slicer(frame)
            if initial:
                return lambda index: rows_of(bounds[index], bounds[index + 1])
            limit = self._rows_per_frame(frame)
            if limit is None:  # the row size varies: the frames' sizes are found per key
                return lambda index: list(self.chunks(rows_of(bounds[index],
                                                              bounds[index + 1])))

            def frames_of(index: int) -> list[pd.DataFrame]:
                start, stop = bounds[index], bounds[index + 1]
                if stop - start <= limit:
                    return [rows_of(start, stop)]
                return [rows_of(first, min(first + limit, stop))
                        for first in range(start, stop, limit)]

            return frames_of
        rows = self.rows(table)
        return lambda index: rows[bounds[index]:bounds[index + 1]]

    def _rows_per_frame(self, frame: pd.DataFrame) -> int | None:
        """The most rows a frame handed over holds, the same for every key of the batch when
        every column has a NumPy dtype (a row's bytes as `chunks` counts them are then the
        same for every row); None when it must be found per key."""
        limit = self.max_records if self.max_records > 0 else max(len(frame), 1)
        if self.max_bytes > 0:
            dtypes = list(frame.dtypes)
            if not all(isinstance(dtype, np.dtype) for dtype in dtypes):
                return None
            per_row = max(1, sum(dtype.itemsize for dtype in dtypes))
            limit = min(limit, max(1, self.max_bytes // per_row))
        return limit

    def chunks(self, frame: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """A key's rows in the frames PySpark would hand over: at most `max_records` rows and
        about `max_bytes` bytes each (Arrow's batch limits); one frame when both allow."""
        rows = len(frame)
        size = rows
        if self.max_records > 0:
            size = min(size, self.max_records)
        if self.max_bytes > 0 and rows > 1:
            per_row = max(1, int(frame.memory_usage(index=False).sum()) // rows)
            size = min(size, max(1, self.max_bytes // per_row))
        if size >= rows:
            yield frame
            return
        for start in range(0, rows, size):
            part = frame.iloc[start:start + size]
            part.index = pd.RangeIndex(len(part))
            yield part

    def _as_initial_state(self, table: pa.Table) -> pa.Table:
        """The initial state's rows under its own column names, in its own column order
        (the task sees its grouping columns under the query's key names)."""
        if not self.initial_names:
            return table
        values = table.column_names[len(self.initial_keys):]
        renamed = table.rename_columns([*self.initial_keys, *values])
        return renamed.select(list(self.initial_names))

    def pandas_frame(self, table: pa.Table) -> pd.DataFrame:
        """All rows as one frame with PySpark's pandas types."""
        columns = [self._pandas_column(column) for column in table.columns]
        converted = pa.Table.from_arrays(columns, names=table.column_names)
        return converted.to_pandas(coerce_temporal_nanoseconds=True)

    def _pandas_column(self, column: pa.ChunkedArray) -> pa.ChunkedArray:
        kind = column.type
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            return pc.local_timestamp(column.cast(pa.timestamp(kind.unit, tz=self.zone)))
        if pa.types.is_integer(kind) and kind != pa.int64():
            return column.cast(pa.int64())
        if pa.types.is_float32(kind) or pa.types.is_float16(kind):
            return column.cast(pa.float64())
        return column

    def rows(self, table: pa.Table) -> list[Any]:
        """All rows as `Row`s, timestamps aware in the session time zone."""
        from pyspark.sql import Row

        values = []
        for column in table.columns:
            kind = column.type
            if pa.types.is_timestamp(kind) and kind.tz is not None:
                column = column.cast(pa.timestamp(kind.unit, tz=self.zone))
            values.append(column.to_pylist())
        # what Row(*names)(*values) makes, without its per-row checks: a Row of the values
        # whose __fields__ is the one Row of names that every row shares
        fields = Row(*table.column_names)
        make = tuple.__new__
        rows = [make(Row, items) for items in zip(*values, strict=True)]
        for row in rows:
            row.__fields__ = fields
        return rows

    # ---- outputs ----------------------------------------------------------------------------

    @functools.cached_property
    def _distinct_names(self) -> bool:
        return len(set(self.output_names)) == len(self.output_names)

    def output_frame(self, frame: Any, processor: str) -> pd.DataFrame:
        """A yielded frame with the output schema's column names; naive timestamps are read
        in the session time zone, as PySpark reads them."""
        if not isinstance(frame, pd.DataFrame):
            raise OutputSchemaError(f"{processor} yielded a {type(frame).__name__}; "
                                    f"transformWithStateInPandas processors yield pandas "
                                    f"DataFrames")
        labels = list(frame.columns)
        if not all(isinstance(label, str) for label in labels):
            if len(labels) != len(self.output_names):
                raise OutputSchemaError(f"{processor} yielded a frame of {len(labels)} "
                                        f"unnamed columns; the output schema has "
                                        f"{len(self.output_names)} "
                                        f"({', '.join(self.output_names)})")
            frame = frame.set_axis(list(self.output_names), axis=1)
        if self.output_timestamps and self.zone not in _UTC_NAMES:
            local = {name: frame[name].dt.tz_localize(self.zone, ambiguous=False,
                                                      nonexistent="shift_forward")
                     for name in self.output_timestamps
                     if name in frame.columns and _naive_datetimes(frame[name])}
            if local:
                frame = frame.assign(**local)
        return frame

    def output_row(self, row: Any, processor: str) -> tuple[Any, ...]:
        """A yielded Row as a tuple in output-schema order (matched by field name, missing
        fields null, as PySpark does); an unnamed tuple is taken in order."""
        if isinstance(row, tuple):
            fields = getattr(row, "__fields__", None)
            if fields is None:
                return row
            if tuple(fields) == self.output_names and self._distinct_names and \
                    not any(isinstance(value, _NESTED) for value in row):
                return tuple(row)  # what the lookup by name gives, in one step
            values = row.asDict(True)  # type: ignore[attr-defined]
            return tuple(values.get(name) for name in self.output_names)
        raise OutputSchemaError(f"{processor} yielded a {type(row).__name__}; "
                                f"transformWithState processors yield pyspark.sql.Row")


def tzinfo_of(zone: str) -> dt.tzinfo:
    """A session time zone as tzinfo: a region ("Europe/Paris") or an offset ("+02:00")."""
    try:
        return ZoneInfo(zone)
    except (ValueError, KeyError):
        pass
    sign = -1 if zone.startswith("-") else 1
    hours, _, minutes = zone.lstrip("+-").partition(":")
    try:
        return dt.timezone(sign * dt.timedelta(hours=int(hours), minutes=int(minutes or 0)))
    except ValueError as exc:
        raise ConfigError(f"spark.sql.session.timeZone: {zone!r} is neither a region nor an "
                          f"offset such as +02:00") from exc


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _naive_datetimes(series: pd.Series) -> bool:
    return pd.api.types.is_datetime64_dtype(series.dtype) and getattr(
        series.dtype, "tz", None) is None


def output_timestamp_columns(schema: Any) -> tuple[str, ...]:
    """The TIMESTAMP (not TIMESTAMP_NTZ) columns of an output StructType."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return tuple(f.name for f in schema.fields if isinstance(f.dataType, TimestampType)
                 and not isinstance(f.dataType, TimestampNTZType))


def key_type_names(schema: Any, key_columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(schema[name].dataType.typeName() for name in key_columns)
