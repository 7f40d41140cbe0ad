"""The transaction cache: the writes of the open transaction, coalesced per key.

Reads check it first (read-your-writes). It is flushed into RocksDB and the changelog in one
go, so many writes to one key cost one record, and the changelog gets one payload per flush.

Layout, chosen for the write path (benchmarks/write_path): one plain dict per column family,
user key -> value or None for a delete, so a put is one dict store with no key encoding and no
per-write tuple; the physical keys and the payload are built per flush, column family by
column family (columns.encode_tables). ChangelogStateStore inlines `put` and `lookup` on
these fields; both must keep the same accounting. Bulk writes (`put_columns`) go into the same
dicts with one dict.update per slice and their accounting from numpy sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyspark_dstl.backend.engines.records import OP_DELETE, OP_PUT, Record, cf_prefix

ENTRY_OVERHEAD = 16
ABSENT: Any = object()  # "not in the cache", distinct from None ("deleted in this transaction")

Table = dict[bytes, bytes | None]
Column = tuple[Table, bytes, int]  # (table, physical key prefix, bytes charged per entry)
Pending = list[tuple[str, bytes, Table]]  # (cf, physical key prefix, table), non-empty tables


class TransactionCache:
    """Per column family: user key -> value, or None for a delete.

    An entry costs len(physical key) + len(value) + ENTRY_OVERHEAD bytes."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.columns: dict[str, Column] = {}
        self.deletes: set[str] = set()  # column families with a delete since the last drain
        self.entries = 0
        self.bytes = 0
        self.removes = 0  # entries that are deletes (a put over a delete takes one back)
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def __len__(self) -> int:
        return self.entries

    @property
    def size_bytes(self) -> int:
        return self.bytes

    def column(self, cf: str) -> Column:
        """The column of `cf`, made on first use; StoreIdError for an invalid name."""
        column = self.columns.get(cf) if type(cf) is str else None
        if column is None:
            prefix = cf_prefix(cf)  # validates
            column = ({}, prefix, len(prefix) + ENTRY_OVERHEAD)
            self.columns[cf] = column
        return column

    def is_full(self) -> bool:
        return self.entries >= self.max_entries or self.bytes >= self.max_bytes

    def put(self, cf: str, key: bytes, value: bytes) -> bool:
        """Write `key`; True when the cache is now full (the caller flushes it)."""
        try:
            table, _, overhead = self.columns[cf]
        except (KeyError, TypeError):  # a new or an invalid column family
            table, _, overhead = self.column(cf)
        old = table.get(key, ABSENT)
        table[key] = value
        if old is ABSENT:
            self.entries += 1
            self.bytes += overhead + len(key) + len(value)
        elif old is None:
            self.bytes += len(value)
            self.removes -= 1
        else:
            self.bytes += len(value) - len(old)
        return self.entries >= self.max_entries or self.bytes >= self.max_bytes

    def put_columns(self, cf: str, keys: Sequence[bytes], values: Sequence[bytes],
                    costs: np.ndarray, start: int) -> int:
        """put() of keys[start:stop] and their values, stopping right after the write that
        fills the cache as put() would; returns stop (the caller flushes, then goes on).
        `costs`: the running sum of what each write costs as a new entry (overhead, key and
        value bytes), from the first write of `keys` on.

        Slices whose keys are all new to the cache take one dict.update and their cost from
        `costs`; a key written twice in the slice counts once with its last value. A slice
        that overwrites cached keys goes through put() per key (the old values' sizes)."""
        table, _, overhead = self.column(cf)
        spent = int(costs[start - 1]) if start else 0
        room = max(1, min(self.max_entries - self.entries, len(keys) - start))
        fitting = int(np.searchsorted(costs, spent + self.max_bytes - self.bytes, "left"))
        stop = min(start + room, max(start + 1, fitting + 1), len(keys))
        slice_keys = keys[start:stop]
        slice_values = values[start:stop]
        if any(map(table.__contains__, slice_keys)):
            for key, value in zip(slice_keys, slice_values, strict=True):
                self.put(cf, key, value)
            return stop
        before = len(table)
        table.update(zip(slice_keys, slice_values, strict=True))
        added = len(table) - before
        if added == stop - start:
            self.bytes += int(costs[stop - 1]) - spent
        else:  # a key repeated within the slice: each distinct key once, its last value
            distinct = dict.fromkeys(slice_keys)
            self.bytes += (overhead * added + sum(map(len, distinct))
                           + sum(map(len, map(table.__getitem__, distinct))))  # type: ignore[arg-type]
        self.entries += added
        return stop

    def filling_slice(self, costs: np.ndarray, start: int, count: int) -> int | None:
        """The end of the slice of a bulk write from `start` that fills this empty cache on
        its own (where put() per key would flush it), or None when the rest of the write
        fits: such a slice can be flushed straight from its columns, without the dicts.
        A key written twice in the slice counts twice here, so the flush may come a few
        writes earlier than put() per key would make it."""
        spent = int(costs[start - 1]) if start else 0
        fitting = int(np.searchsorted(costs, spent + self.max_bytes, "left"))
        stop = min(start + self.max_entries, fitting + 1, count)
        full = stop - start >= self.max_entries or int(costs[stop - 1]) - spent >= self.max_bytes
        return stop if full else None

    def remove(self, cf: str, key: bytes) -> None:
        table, _, overhead = self.column(cf)
        old = table.get(key, ABSENT)
        table[key] = None
        self.deletes.add(cf)
        if old is ABSENT:
            self.entries += 1
            self.removes += 1
            self.bytes += overhead + len(key)
        elif old is not None:
            self.removes += 1
            self.bytes -= len(old)

    def lookup(self, cf: str, key: bytes) -> tuple[bool, bytes | None]:
        """(True, value or None if deleted) when the key was written in this transaction."""
        value = self.column(cf)[0].get(key, ABSENT)
        if value is ABSENT:
            return False, None
        return True, value

    def pending(self) -> Pending:
        """The non-empty tables, to flush; they stay in the cache until clear()."""
        return [(cf, prefix, table) for cf, (table, prefix, _) in self.columns.items() if table]

    def drain(self) -> list[tuple[bytes, Record]]:
        """Every pending write as (physical key, record), column family by column family;
        empties the cache. Keys are unique, so the order within a drain does not matter."""
        drained: list[tuple[bytes, Record]] = [
            (prefix + key, (OP_PUT if value is not None else OP_DELETE, cf, key, value))
            for cf, prefix, table in self.pending() for key, value in table.items()
        ]
        self.clear()
        return drained

    def release(self) -> None:
        """Empty the cache: the transaction ended."""
        self.clear()

    def detach(self) -> None:
        """Empty the cache, leaving its tables untouched to whoever holds them (a commit's
        engine write that runs after the commit returned)."""
        self.columns = {}
        self.deletes = set()
        self.entries = 0
        self.bytes = 0
        self.removes = 0

    def clear(self) -> None:
        for table, _, _ in self.columns.values():
            table.clear()
        self.deletes.clear()
        self.entries = 0
        self.bytes = 0
        self.removes = 0
