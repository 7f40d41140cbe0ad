"""The transaction cache: the writes of the open transaction, coalesced per key.

Reads check it first (read-your-writes). It is flushed into RocksDB and the changelog in one
go, so many writes to one key cost one record, and the changelog gets one payload per flush.

Layout, chosen for the write path (benchmarks/write_path): one plain dict per column family,
user key -> value or None for a delete, so a put is one dict store with no key encoding and no
per-write tuple; the physical keys and the payload are built per flush, column family by
column family (records.encode_changes). ChangelogStateStore inlines `put` and `lookup` on
these fields; both must keep the same accounting.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.backend.engines.records import OP_DELETE, OP_PUT, Record, cf_prefix, new_packer

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
        self._packer: Any = None

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

    def packer(self) -> Any:
        """The msgpack Packer the flushes of this transaction reuse (records.encode_changes):
        its buffer keeps the size of the largest flush until release()."""
        if self._packer is None:
            self._packer = new_packer()
        return self._packer

    def release(self) -> None:
        """Empty the cache and drop the Packer's buffer: the transaction ended."""
        self.clear()
        self._packer = None

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
