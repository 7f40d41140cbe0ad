"""The transaction cache: the writes of the open transaction, coalesced per key.

Reads check it first (read-your-writes). It is flushed into RocksDB and the changelog in one
go, so many writes to one key cost one record, and the changelog gets one payload per flush.
"""

from __future__ import annotations

from backend.records import OP_DELETE, OP_PUT, Record, encode_key

_ENTRY_OVERHEAD = 16


class TransactionCache:
    """Maps physical key -> (cf, user key, value or None for a delete)."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self._entries: dict[bytes, tuple[str, bytes, bytes | None]] = {}
        self._bytes = 0
        self._max_entries = max_entries
        self._max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def is_full(self) -> bool:
        return len(self._entries) >= self._max_entries or self._bytes >= self._max_bytes

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self._set(cf, key, value)

    def remove(self, cf: str, key: bytes) -> None:
        self._set(cf, key, None)

    def _set(self, cf: str, key: bytes, value: bytes | None) -> None:
        raw = encode_key(cf, key)
        old = self._entries.pop(raw, None)
        if old is not None:
            self._bytes -= _cost(raw, old[2])
        self._entries[raw] = (cf, key, value)
        self._bytes += _cost(raw, value)

    def lookup(self, cf: str, key: bytes) -> tuple[bool, bytes | None]:
        """(True, value or None if deleted) when the key was written in this transaction."""
        entry = self._entries.get(encode_key(cf, key))
        if entry is None:
            return False, None
        return True, entry[2]

    def drain(self) -> list[tuple[bytes, Record]]:
        """Every pending write as (physical key, record), in write order; empties the cache."""
        drained: list[tuple[bytes, Record]] = [
            (raw, (OP_PUT if value is not None else OP_DELETE, cf, key, value))
            for raw, (cf, key, value) in self._entries.items()
        ]
        self.clear()
        return drained

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


def _cost(raw: bytes, value: bytes | None) -> int:
    return len(raw) + (len(value) if value is not None else 0) + _ENTRY_OVERHEAD
