"""The aggregate functions a chained aggregation supports, as Spark computes them.

Each function keeps a buffer of one or more Arrow columns per group: it is built from the
batch's rows (`update`), combined with the stored buffer (`merge`, stored rows first, so
arrival order holds) and turned into the result (`finish`). Types and nulls follow Spark:
count is a non-null bigint that skips nulls of its column, sum of integers is a bigint (an
overflow fails, as under Spark's default ANSI mode), sum of decimal(p, s) a decimal(p+10, s),
avg a double (of decimals: decimal(p+4, s+4)), min, max, first and last keep their type,
collect_list an array of the non-null values in arrival order.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.spark.chain.folds import fold

FUNCTIONS = ("count", "sum", "avg", "min", "max", "first", "last", "collect_list")
ALIASES = {"mean": "avg", "first_value": "first", "last_value": "last", "any_value": "first"}


@dataclass(frozen=True)
class AggregateSpec:
    """One aggregate column of the output: `function` over the pre-projected `inputs`
    (count over none counts rows; over several, rows where all are non-null)."""

    output: str
    function: str
    inputs: tuple[str, ...]
    result_type: pa.DataType
    ignore_nulls: bool = False
    sum_type: pa.DataType | None = None  # avg's running sum: float64 or a decimal

    @property
    def buffer_types(self) -> tuple[pa.DataType, ...]:
        if self.function == "count":
            return (pa.int64(),)
        if self.function == "avg":
            assert self.sum_type is not None
            return (self.sum_type, pa.int64())
        if self.function in ("first", "last"):
            return (self.result_type, pa.bool_())
        if self.function == "collect_list":
            return (pa.list_(self.result_type.value_type),)
        return (self.result_type,)

    @property
    def width(self) -> int:
        return len(self.buffer_types)


def update(spec: AggregateSpec, table: pa.Table, groups: np.ndarray, n: int) -> list[pa.Array]:
    """The buffer of every group from the rows of `table` (`groups[i]`: row i's group)."""
    name = spec.function
    what = f"{name}({', '.join(spec.inputs)}) as {spec.output!r}"
    if name == "count":
        if not spec.inputs:
            return [fold(pa.nulls(len(groups)), groups, n, "rows")]
        valid = np.ones(len(groups), dtype=bool)
        for column in spec.inputs:
            valid &= _valid(table.column(column))
        return [fold(pa.nulls(len(groups)), groups, n, "rows", mask=valid)]
    values = _column(table, spec.inputs[0])
    if name == "sum":
        return [fold(values.cast(spec.result_type), groups, n, "sum", what=what)]
    if name == "avg":
        assert spec.sum_type is not None
        return [fold(values.cast(spec.sum_type), groups, n, "sum", what=what),
                fold(values, groups, n, "count")]
    if name in ("min", "max"):
        return [fold(values, groups, n, name)]
    if name in ("first", "last"):
        present = _valid(values) if spec.ignore_nulls else None
        kind = f"{name}_valid" if spec.ignore_nulls else name
        seen = fold(pa.nulls(len(groups)), groups, n, "rows", mask=present)
        return [fold(values, groups, n, kind), pc.greater(seen, 0)]
    if name == "collect_list":
        return [fold(values, groups, n, "collect")]
    raise ValueError(f"unknown aggregate function {name!r}")


def merge(spec: AggregateSpec, buffers: list[pa.Array], groups: np.ndarray,
          n: int) -> list[pa.Array]:
    """Buffers of rows (several per group, in order) combined into one per group."""
    name = spec.function
    what = f"{name}({', '.join(spec.inputs)}) as {spec.output!r}"
    if name == "count":
        return [_zero_nulls(fold(buffers[0], groups, n, "sum", what=what))]
    if name == "sum":
        return [fold(buffers[0], groups, n, "sum", what=what)]
    if name == "avg":
        return [fold(buffers[0], groups, n, "sum", what=what),
                _zero_nulls(fold(buffers[1], groups, n, "sum"))]
    if name in ("min", "max"):
        return [fold(buffers[0], groups, n, name)]
    if name in ("first", "last"):
        seen = np.asarray(buffers[1].fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        value = fold(buffers[0], groups, n, name, mask=seen)
        any_seen = fold(pa.nulls(len(groups)), groups, n, "rows", mask=seen)
        return [value, pc.greater(any_seen, 0)]
    if name == "collect_list":
        return [fold(buffers[0], groups, n, "concat")]
    raise ValueError(f"unknown aggregate function {name!r}")


def finish(spec: AggregateSpec, buffers: list[pa.Array]) -> pa.Array:
    """The aggregate's result per group, of `spec.result_type`."""
    name = spec.function
    if name == "count":
        return _zero_nulls(buffers[0])
    if name == "avg":
        total, count = buffers
        if pa.types.is_decimal(spec.result_type):
            return _decimal_average(total, count, spec.result_type)
        counts = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.int64()), count)
        return pc.divide(total.cast(pa.float64()), counts.cast(pa.float64()))
    if name == "collect_list":
        lists = buffers[0]
        return lists.fill_null(pa.scalar([], lists.type)) if lists.null_count else lists
    return buffers[0]


def _decimal_average(total: pa.Array, count: pa.Array, result: pa.DataType) -> pa.Array:
    """Spark's average of decimals: the sum divided by the count, rounded half up to the
    result's scale (per group, in Python's decimal arithmetic at full precision)."""
    context = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)
    exponent = decimal.Decimal(1).scaleb(-result.scale)
    values: list[decimal.Decimal | None] = []
    for s, c in zip(total.to_pylist(), count.to_pylist(), strict=True):
        if s is None or not c:
            values.append(None)
        else:
            values.append(context.divide(s, decimal.Decimal(c)).quantize(exponent, context=context))
    return pa.array(values, result)


def _column(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _zero_nulls(counts: pa.Array) -> pa.Array:
    return counts.fill_null(0) if counts.null_count else counts


# --- buffers in the state store ------------------------------------------------------------

def storage_type(kind: pa.DataType) -> pa.DataType:
    """The type a buffer column is stored as: what msgpack carries without a Python class
    (timestamps and times as integers, dates as day numbers, decimals as text)."""
    if pa.types.is_timestamp(kind) or pa.types.is_time64(kind) or pa.types.is_duration(kind):
        return pa.int64()
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return pa.int32()
    if pa.types.is_decimal(kind):
        return pa.string()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return pa.list_(storage_type(kind.value_type))
    return kind


def to_plain(column: pa.Array) -> list[object]:
    """A buffer column as plain Python values (one per group)."""
    stored = storage_type(column.type)
    return (column.cast(stored) if stored != column.type else column).to_pylist()


def from_plain(values: list[object], kind: pa.DataType) -> pa.Array:
    """The inverse of `to_plain`."""
    stored = storage_type(kind)
    array = pa.array(values, stored)
    return array.cast(kind) if stored != kind else array
