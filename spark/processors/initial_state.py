"""Initial state: rows of a second DataFrame that travel with the first batch's input rows.

The stateful stage reads one DataFrame, so on the first batch the driver unions the input with
the initial state rows: both get every column of the other as nulls, the initial state's
columns under a prefix, and a marker column telling them apart. The task splits them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.spark.keys.key_grouping import GROUP_COLUMN

KIND_COLUMN = "__dstl_kind"
PREFIX = "__dstl_init_"
INPUT, INITIAL = 0, 1


@dataclass(frozen=True)
class InitialState:
    """A DataFrame grouped by columns that match the query's grouping key (by position)."""

    df: Any
    key_columns: tuple[str, ...]

    @classmethod
    def of(cls, value: Any, query_keys: tuple[str, ...], query_schema: Any) -> InitialState:
        """From a GroupedData (`df.groupBy(...)`, as PySpark takes it) or (DataFrame, keys)."""
        from pyspark.sql import functions as F

        if isinstance(value, tuple) and len(value) == 2:
            df, keys = value[0], tuple(value[1])
        elif hasattr(value, "agg") and hasattr(value, "_df"):
            df = value._df
            # the grouping columns are the leading columns of any aggregate's schema
            keys = tuple(value.agg(F.count(F.lit(1)).alias("__dstl_n")).columns[:-1])
        else:
            raise ConfigError(f"initial_state: expected df.groupBy(<key columns>) or a "
                              f"(DataFrame, key columns) pair, got {type(value).__name__}")
        if len(keys) != len(query_keys):
            raise ConfigError(f"initial_state: grouped by {keys}, but the query groups by "
                              f"{query_keys}: the keys must match one to one")
        for mine, theirs in zip(keys, query_keys, strict=True):
            if mine not in df.columns:
                raise ConfigError(f"initial_state: no column {mine!r} in {df.columns}")
            left, right = df.schema[mine].dataType, query_schema[theirs].dataType
            if left != right:
                raise ConfigError(f"initial_state: key column {mine!r} has type "
                                  f"{left.simpleString()}, the query's {theirs!r} has "
                                  f"{right.simpleString()}")
        return cls(df, keys)

    def value_columns(self) -> list[str]:
        return [c for c in self.df.columns if c not in self.key_columns]

    def combine(self, keyed_input: Any, query_keys: tuple[str, ...]) -> Any:
        """The input with the initial state rows appended (one schema for both)."""
        from pyspark.sql import functions as F

        input_cols = [c for c in keyed_input.columns if c not in query_keys]
        values = self.value_columns()
        init_types = {c: self.df.schema[c].dataType for c in values}
        left = keyed_input.select(
            *[F.col(c) for c in keyed_input.columns],
            *[F.lit(None).cast(init_types[c]).alias(PREFIX + c) for c in values],
            F.lit(INPUT).alias(KIND_COLUMN))
        right = self.df.select(
            *[F.col(theirs).alias(mine) for theirs, mine in zip(self.key_columns, query_keys,
                                                                 strict=True)],
            *[F.lit(None).cast(keyed_input.schema[c].dataType).alias(c) for c in input_cols],
            *[F.col(c).alias(PREFIX + c) for c in values],
            F.lit(INITIAL).alias(KIND_COLUMN))
        return left.unionByName(right.select(*left.columns))


def split(table: pa.Table, key_columns: tuple[str, ...]) -> tuple[pa.Table, pa.Table | None]:
    """(input rows, initial state rows or None) of a task's table."""
    if KIND_COLUMN not in table.column_names:
        return table, None
    kinds = table.column(KIND_COLUMN)
    init_names = [n for n in table.column_names if n.startswith(PREFIX)]
    inputs = table.filter(pc.equal(kinds, INPUT)).drop_columns([*init_names, KIND_COLUMN])
    initial_rows = table.filter(pc.equal(kinds, INITIAL))
    grouped = [GROUP_COLUMN] if GROUP_COLUMN in table.column_names else []
    initial = initial_rows.select([*key_columns, *grouped, *init_names]).rename_columns(
        [*key_columns, *grouped, *(n[len(PREFIX):] for n in init_names)])
    return inputs, initial
