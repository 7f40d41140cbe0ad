"""Folding rows into groups with Arrow: the one primitive every chained aggregate is made of.

A fold reduces the rows of a column into one value per group (`groups[i]` is row i's group,
0..n-1), keeping the rows' order inside a group, so "first", "last" and list concatenation
follow arrival order. Sums, counts, minima, maxima, firsts and lasts run as one Arrow hash
aggregation each; lists are gathered in numpy. Nothing loops over rows in Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_dstl.spark.spark_errors import AggregateOverflowError

LONG_LIMIT = 2 ** 63


def fold(values: pa.Array, groups: np.ndarray, n: int, kind: str,
         mask: np.ndarray | None = None, what: str = "") -> pa.Array:
    """One value per group 0..n-1 of `values` (rows where `mask` is False take no part).

    kinds: "sum" (null when a group has no non-null value), "count" (non-null values),
    "rows" (rows), "min", "max", "first" / "last" (of the rows, nulls included),
    "first_valid" / "last_valid" (non-null values only), "collect" (non-null values as a list),
    "concat" (lists joined in row order; a null list counts as empty)."""
    if mask is not None:
        keep = np.flatnonzero(mask)
        values, groups = values.take(pa.array(keep, pa.int64())), groups[keep]
    if kind == "rows":
        return pa.array(np.bincount(groups, minlength=n).astype(np.int64), pa.int64())
    if kind == "count":
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return pa.array(np.bincount(groups[valid], minlength=n).astype(np.int64), pa.int64())
    if kind in ("collect", "concat"):
        return _gather_lists(values, groups, n, kind == "collect")
    return _hash_fold(values, groups, n, kind, what)


_HASH_FUNCTIONS = {
    "sum": ("sum", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "min": ("min", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "max": ("max", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "first": ("first", pc.ScalarAggregateOptions(skip_nulls=False, min_count=1)),
    "last": ("last", pc.ScalarAggregateOptions(skip_nulls=False, min_count=1)),
    "first_valid": ("first", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
    "last_valid": ("last", pc.ScalarAggregateOptions(skip_nulls=True, min_count=1)),
}


def _hash_fold(values: pa.Array, groups: np.ndarray, n: int, kind: str, what: str) -> pa.Array:
    function, options = _HASH_FUNCTIONS[kind]
    if len(values) == 0:
        return pa.nulls(n, values.type)
    table = pa.table({"g": pa.array(groups, pa.int64()), "v": values})
    folded = table.group_by("g", use_threads=False).aggregate([("v", function, options)])
    result = folded.column(f"v_{function}").combine_chunks()
    if kind == "sum" and pa.types.is_integer(values.type):
        _check_long_sums(values, table, what)
    if kind == "sum" and pa.types.is_decimal(result.type) and result.type != values.type:
        result = result.cast(values.type)  # Arrow widens to precision 38; fails if it overflows
    return _scatter(result, np.asarray(folded.column("g").to_numpy(), dtype=np.int64), n)


def _check_long_sums(values: pa.Array, table: pa.Table, what: str) -> None:
    """Arrow's integer sums wrap around silently; Spark fails. Summed again in floating
    point, any group at or past 2^63 is an overflow."""
    doubles = table.set_column(1, "v", values.cast(pa.float64(), safe=False))
    sums = doubles.group_by("g", use_threads=False).aggregate([("v", "sum")]).column("v_sum")
    largest = pc.max(pc.abs(sums)).as_py()
    if largest is not None and largest >= LONG_LIMIT:
        raise AggregateOverflowError(
            f"{what or 'sum'}: the sum leaves the range of bigint (about {largest:.3g}); "
            f"cast the summed column to a decimal (e.g. .cast('decimal(38,0)')) to sum "
            f"larger values, as in Spark")


def _scatter(values: pa.Array, positions: np.ndarray, n: int) -> pa.Array:
    """`values[j]` placed at group `positions[j]`; groups without a value are null."""
    index = np.full(n, -1, dtype=np.int64)
    index[positions] = np.arange(len(positions), dtype=np.int64)
    return values.take(pa.array(index, pa.int64(), mask=index < 0))


def _gather_lists(values: pa.Array, groups: np.ndarray, n: int, singletons: bool) -> pa.Array:
    """Per group, the values (or the lists' elements) in row order, as one list array."""
    if singletons:
        element_type = values.type
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        keep = np.flatnonzero(valid)
        elements = values.take(pa.array(keep, pa.int64()))
        owners = groups[keep]
    else:
        element_type = values.type.value_type
        lists = values.fill_null(pa.scalar([], values.type)) if values.null_count else values
        elements = pc.list_flatten(lists)
        parents = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False),
                             dtype=np.int64)
        owners = groups[parents]
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=n)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    ordered = elements.take(pa.array(order, pa.int64())) if len(order) else \
        pa.array([], element_type)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), ordered,
                                    type=pa.list_(element_type))
