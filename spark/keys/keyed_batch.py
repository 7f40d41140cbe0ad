"""Group one partition's rows by key with Arrow and NumPy, never a Python loop over rows.

Rows are sorted by group once; group i is the row range offsets[i]:offsets[i+1], so the
per-key API hands out cheap slices of one frame and the vectorized API works on whole columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import Any, overload

import numpy as np
import pandas as pd
import pyarrow as pa

from pyspark_dstl.spark.codec.values import encode_key
from pyspark_dstl.spark.keys.key_columns import encode_key_columns
from pyspark_dstl.spark.keys.key_grouping import GROUP_COLUMN, KeyGrouping
from pyspark_dstl.spark.spark_errors import StateVariableError

# pandas' own row slicing behind .iloc[a:b] (pandas 2.x); a per-key frame is made for every key
# of a batch, and the indexer's dispatch was a quarter of its cost
_SLICE_ROWS = getattr(pd.DataFrame, "_slice", None)
# the steps of _slice, called directly (pandas 2.x): the block manager's slice, the frame around
# it, the link to the parent behind SettingWithCopyWarning; __finalize__ only copies attrs and
# flags, so it runs only when the parent has any
_FROM_MANAGER = getattr(pd.DataFrame, "_from_mgr", None)
_SET_IS_COPY = getattr(pd.DataFrame, "_set_is_copy", None)


class Keys(Sequence[tuple[Any, ...]]):
    """Distinct grouping keys as tuples, with their stored bytes (key group + msgpack array)
    computed once: given (a batch's keys, grouped by Spark), or by `grouping` when asked."""

    def __init__(self, tuples: list[tuple[Any, ...]], encoded: list[bytes] | None = None,
                 grouping: KeyGrouping | None = None) -> None:
        self._tuples = tuples
        self._encoded = encoded
        self._grouping = grouping

    @classmethod
    def of(cls, keys: Sequence[Sequence[Any]], grouping: KeyGrouping | None = None) -> Keys:
        """`keys` as Keys; keys without stored bytes get them from `grouping`."""
        if isinstance(keys, Keys):
            if keys._encoded is not None or keys._grouping is not None or grouping is None:
                return keys
            return cls(keys._tuples, None, grouping)
        return cls([tuple(k) for k in keys], None, grouping)

    @property
    def encoded(self) -> list[bytes]:
        if self._encoded is None:
            if self._grouping is None:
                raise StateVariableError(
                    "grouping keys without their key group: a stored key starts with "
                    "pmod(Spark's hash of the key, G), which needs the key columns' Spark "
                    "types; pass the keys through the handle's state or timer methods (or "
                    "Keys.of(keys, KeyGrouping(key_types, key_groups)))")
            self._encoded = self._grouping.encode(self._tuples)
        return self._encoded

    def __len__(self) -> int:
        return len(self._tuples)

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> Keys: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, ...] | Keys:
        if isinstance(index, slice):
            encoded = self._encoded[index] if self._encoded is not None else None
            return Keys(self._tuples[index], encoded, self._grouping)
        return self._tuples[index]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._tuples)

    def take(self, indices: Sequence[int] | np.ndarray) -> Keys:
        """The keys at `indices`, keeping their stored bytes (a list of the tuples would
        have to be hashed again to find them)."""
        picked = [int(i) for i in indices]
        encoded = None if self._encoded is None else [self._encoded[i] for i in picked]
        return Keys([self._tuples[i] for i in picked], encoded, self._grouping)


class KeyedBatch:
    """One partition's rows of one micro-batch, sorted and grouped by the grouping key.

    Each key's group comes from the stage's GROUP_COLUMN (computed by Spark; the column is
    dropped, user code never sees it), else from `grouping` (tables built outside the stage)."""

    def __init__(self, table: pa.Table, key_columns: Sequence[str],
                 grouping: KeyGrouping | None = None) -> None:
        self.key_columns = tuple(key_columns)
        table = table.combine_chunks()
        groups_column: pa.ChunkedArray | None = None
        if GROUP_COLUMN in table.column_names:
            groups_column = table.column(GROUP_COLUMN)
            table = table.drop_columns([GROUP_COLUMN])
        group_ids = _group_ids(table, self.key_columns)
        order = np.argsort(group_ids, kind="stable")
        counts = np.bincount(group_ids) if len(group_ids) else np.zeros(0, dtype=np.int64)
        self.offsets: np.ndarray = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        self.table: pa.Table = table.take(pa.array(order)) if len(order) else table
        first_rows = pa.array(order[self.offsets[:-1]] if len(order) else [], pa.int64())
        self.key_table: pa.Table = table.select(list(self.key_columns)).take(first_rows)
        columns = [self.key_table.column(i).to_pylist() for i in range(len(self.key_columns))]
        tuples = list(zip(*columns, strict=True)) if columns else []
        encoded = None
        if groups_column is not None and len(tuples):
            groups = np.asarray(groups_column.take(first_rows).to_numpy(zero_copy_only=False),
                                dtype=np.int64)
            encoded = encode_key_columns(self.key_table.columns, groups)
            if encoded is None:  # a key type not built in Arrow: key by key
                encoded = [encode_key(key, int(group))
                           for key, group in zip(tuples, groups, strict=True)]
        self.keys = Keys(tuples, encoded, grouping)

    def __len__(self) -> int:
        """The number of distinct keys."""
        return len(self.keys)

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    @property
    def counts(self) -> np.ndarray:
        """Rows per key, in key order."""
        return np.diff(self.offsets)

    @cached_property
    def group_ids(self) -> np.ndarray:
        """For every (sorted) row, the index of its key in `keys`."""
        return np.repeat(np.arange(len(self.keys), dtype=np.int64), self.counts)

    @cached_property
    def frame(self) -> pd.DataFrame:
        """All rows as one pandas frame, sorted by key (built once, sliced per key)."""
        return self.table.to_pandas()

    def key_frame(self) -> pd.DataFrame:
        """The distinct keys as a pandas frame, one row per key, in key order."""
        return self.key_table.to_pandas()

    @cached_property
    def _bounds(self) -> list[int]:
        return [int(offset) for offset in self.offsets]

    def rows_of(self, index: int) -> pd.DataFrame:
        """The rows of key number `index` as a slice (a view) of `frame`."""
        bounds = self._bounds
        rows = slice(bounds[index], bounds[index + 1])
        frame = self.frame
        if _FROM_MANAGER is not None and _SET_IS_COPY is not None:
            manager = frame._mgr.get_slice(rows, axis=1)
            result: pd.DataFrame = _FROM_MANAGER(manager, axes=manager.axes)
            if frame.attrs or not frame.flags.allows_duplicate_labels:
                result = result.__finalize__(frame)
            _SET_IS_COPY(result, frame)
            return result
        if _SLICE_ROWS is not None:  # what .iloc[rows] ends in, without its dispatch
            return _SLICE_ROWS(frame, rows)
        return frame.iloc[rows]


def renumbered_slicer(frame: pd.DataFrame) -> Callable[[int, int], pd.DataFrame]:
    """Rows [start, stop) of `frame` as a frame of their own index 0..n-1, the way PySpark
    hands a key's rows over; the columns are views of `frame`'s (no copy). It builds the
    sliced block manager with a fresh RangeIndex directly: `.iloc` followed by a new index
    cost four times as much, once per key of a batch."""
    manager = frame._mgr
    if _FROM_MANAGER is None or not hasattr(manager, "get_slice") or \
            frame.attrs or not frame.flags.allows_duplicate_labels:
        def sliced(start: int, stop: int) -> pd.DataFrame:
            part = frame.iloc[start:stop]
            part.index = pd.RangeIndex(stop - start)
            return part

        return sliced
    from_manager = _FROM_MANAGER
    # a fresh index per frame (a processor may rename it), without RangeIndex's checks
    new_index = getattr(pd.RangeIndex, "_simple_new", None) or (lambda numbers: pd.RangeIndex(
        numbers.start, numbers.stop))

    def renumbered(start: int, stop: int) -> pd.DataFrame:
        part = manager.get_slice(slice(start, stop), axis=1)
        part.axes[1] = new_index(range(stop - start))
        result: pd.DataFrame = from_manager(part, axes=part.axes)
        return result

    return renumbered


def _group_ids(table: pa.Table, key_columns: Sequence[str]) -> np.ndarray:
    """Dense group id per row: equal keys (nulls included) get equal ids."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    combined: np.ndarray | None = None
    for name in key_columns:
        encoded = table.column(name).combine_chunks().dictionary_encode(null_encoding="encode")
        indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if combined is None:
            combined = indices
        else:
            combined = combined * len(encoded.dictionary) + indices
            _, combined = np.unique(combined, return_inverse=True)
    assert combined is not None
    return combined.astype(np.int64, copy=False)
