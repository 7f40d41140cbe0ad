"""Reference counts of uploaded changelog files, shared by every writer of one storage.

A file may hold change sets of several writers (one drain, one file per directory); it may be
deleted only when none of them still holds a change set in it.
"""

from __future__ import annotations

import threading


class FileRefCounts:
    """Live change sets per uploaded file, across all writers; a file at zero is released."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def register(self, path: str, change_sets: int) -> None:
        with self._lock:
            self._counts[path] = self._counts.get(path, 0) + change_sets

    def drop(self, path: str) -> bool:
        """One change set of `path` is gone; True when it was the last one."""
        with self._lock:
            left = self._counts.get(path, 0) - 1
            if left > 0:
                self._counts[path] = left
                return False
            self._counts.pop(path, None)
            return True

    def live(self, path: str) -> int:
        with self._lock:
            return self._counts.get(path, 0)
