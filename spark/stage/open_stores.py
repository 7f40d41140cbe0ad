"""The executor side's store cache: one StateBackend per settings, providers kept open.

A provider keeps its store's local directory locked and its RocksDB open between tasks, so a
partition that comes back to the same Python worker loads with no I/O and can adopt the snapshot
that finished in the background. When another worker of the host gets the partition, it leaves
a release request next to the store's lock; the holder's reaper thread closes the idle provider
at once, which flushes RocksDB and marks the directory with the version it holds, and the
newcomer takes that directory over, again with no remote I/O (it restores from the checkpoint
only when the directory is not at the version it must load). Nothing here runs before a task
does, so RocksDB is only ever opened inside an executor's Python worker, never before a fork.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.naming import make_store_id, split_store_id
from pyspark_dstl.backend.local.dirs import location_dir
from pyspark_dstl.backend.store.api import StateStoreProvider
from pyspark_dstl.backend.store.provider import STORES_DIR
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.spark.spark_errors import DstlSparkError

log = logging.getLogger(__name__)
REQUEST_NAME = ".release-request"
_POLL_SECONDS = 0.005  # the reaper's look for release requests: a waiting task waits this


@dataclass
class _Entry:
    backend: StateBackend
    url: str
    operator: str
    partition: int
    request_path: str
    busy: bool = False
    last_used: float = 0.0


class OpenStores:
    """Per-process registry; thread-safe. Use `executor_stores()` for the process-wide one."""

    def __init__(self, idle_timeout: float = 600.0) -> None:
        self._backends: dict[tuple[tuple[str, str], ...], StateBackend] = {}
        self._entries: dict[tuple[int, str, str], _Entry] = {}
        self._lock = threading.Lock()
        self._idle_timeout = idle_timeout
        self._reaper: threading.Thread | None = None
        self._stopped = threading.Event()

    def backend(self, settings: Mapping[str, str]) -> StateBackend:
        key = tuple(sorted(settings.items()))
        with self._lock:
            backend = self._backends.get(key)
            if backend is None:
                backend = StateBackend(BackendSettings.from_mapping(settings))
                self._backends[key] = backend
            return backend

    @contextlib.contextmanager
    def provider(self, settings: Mapping[str, str], url: str, operator: str,
                 partition: int) -> Iterator[StateStoreProvider]:
        """The store's provider for the duration of one task."""
        backend = self.backend(settings)
        store_id = make_store_id(operator, partition)
        key = (id(backend), url, store_id)
        with self._lock:
            entry = self._entries.get(key)
            requested = entry is None  # a new entry: another process may hold the store
            if entry is None:
                entry = _Entry(backend, url, operator, partition,
                               _request_path(backend.settings, url, store_id))
                self._entries[key] = entry
            if entry.busy:
                raise DstlSparkError(f"store {store_id!r} is already in use in this process")
            entry.busy = True
            self._start_reaper()
            provider = backend.provider(url, operator, partition)
        if requested:
            _touch(entry.request_path)
        try:
            yield provider
        except BaseException:
            # a failed task leaves its instance dirty: close it rather than hold the lock
            self._close(key, entry)
            raise
        finally:
            if requested:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.request_path)
            with self._lock:
                entry.busy = False
                entry.last_used = time.monotonic()

    def open_stores(self) -> list[str]:
        with self._lock:
            return sorted(store_id for _, _, store_id in self._entries)

    def close(self) -> None:
        """Close every provider and backend (waits for uploads in flight)."""
        self._stopped.set()
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
            self._entries.clear()
        for backend in backends:
            try:
                backend.close()
            except Exception:  # at exit: report and go on closing the others
                log.warning("closing a state backend failed", exc_info=True)

    # --- hand-off -------------------------------------------------------------------------------

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name="dstl-store-reaper",
                                            daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while not self._stopped.wait(_POLL_SECONDS):
            now = time.monotonic()
            with self._lock:
                idle = [(key, entry) for key, entry in self._entries.items() if not entry.busy]
            for key, entry in idle:
                if os.path.exists(entry.request_path) or \
                        now - entry.last_used > self._idle_timeout:
                    self._close(key, entry, only_if_idle=True)

    def _close(self, key: tuple[int, str, str], entry: _Entry,
               only_if_idle: bool = False) -> None:
        with self._lock:  # held while closing, so no task can pick up the closing provider
            if self._entries.get(key) is not entry or (only_if_idle and entry.busy):
                return
            del self._entries[key]
            try:
                entry.backend.release(entry.url, entry.operator, entry.partition)
            except Exception:  # the store is given up either way; the next load restores it
                log.warning("closing store %s/%s of %s failed", entry.operator,
                            entry.partition, entry.url, exc_info=True)


def _request_path(settings: BackendSettings, location: str, store_id: str) -> str:
    operator, partition = split_store_id(store_id)
    return os.path.join(location_dir(settings.local_dir, location), STORES_DIR, operator,
                        str(partition), REQUEST_NAME)


def _touch(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8"):
        pass


_CACHE: OpenStores | None = None
_CACHE_PID: int | None = None
_CACHE_LOCK = threading.Lock()


def executor_stores() -> OpenStores:
    """The process's cache, created on first use (and anew in a forked child)."""
    global _CACHE, _CACHE_PID
    with _CACHE_LOCK:
        if _CACHE is None or os.getpid() != _CACHE_PID:
            _CACHE = OpenStores()
            _CACHE_PID = os.getpid()
            atexit.register(_CACHE.close)
        return _CACHE
