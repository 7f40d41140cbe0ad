"""Which remote copy an identical local file may reuse, per store.

The key is (local name, size, CRC-32), never the name alone: after a reload of an older
version, across two attempts of one store, or after compaction, RocksDB reuses file numbers
for different content. Entries come only from uploads this process completed and from files
of restored (verified) manifests, so a mapping always points at bytes known to be equal.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

FileKey = tuple[str, int, int]


class UploadedFiles:
    """Thread-safe map store_id -> {(name, size, crc): remote path}."""

    def __init__(self) -> None:
        self._by_store: dict[str, dict[FileKey, str]] = {}
        self._lock = threading.Lock()

    def lookup(self, store_id: str, key: FileKey) -> str | None:
        with self._lock:
            return self._by_store.get(store_id, {}).get(key)

    def add(self, store_id: str, key: FileKey, dfs_path: str) -> None:
        with self._lock:
            self._by_store.setdefault(store_id, {})[key] = dfs_path

    def forget(self, store_id: str, dfs_paths: Iterable[str] | None = None) -> None:
        """Drop entries pointing at `dfs_paths` (all of the store's when None)."""
        with self._lock:
            if dfs_paths is None:
                self._by_store.pop(store_id, None)
                return
            gone = set(dfs_paths)
            entries = self._by_store.get(store_id, {})
            for key in [k for k, path in entries.items() if path in gone]:
                del entries[key]

    def paths(self, store_id: str) -> set[str]:
        with self._lock:
            return set(self._by_store.get(store_id, {}).values())
