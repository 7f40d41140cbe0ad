"""A local directory cache of downloaded changelog segments.

Changelog files are immutable, so a range of one never goes stale: entries are keyed by
(object URL, offset, length) and only leave by LRU eviction past the size bound, or when a reader
finds one corrupt. The cache does not verify content itself; the reader decodes every entry with
its CRCs and drops what fails. Several processes may share a directory: entries appear atomically
(temp file + os.replace), recency is kept in file mtimes, and each process bounds the entries it
knows about (the bound is per process, not global).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict

from pyspark_dstl.changelog.changelog_settings import CHANGELOG_SETTING_KEYS, ChangelogSettings
from pyspark_dstl.core.errors import ConfigError

log = logging.getLogger(__name__)

_SUFFIX = ".seg"
_TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 3600.0
"""Temp files older than this are leftovers of a crashed process and are removed on open."""


class SegmentCache:
    """Byte ranges of immutable objects on local disk, bounded by `max_bytes` with LRU eviction."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ConfigError(f"{CHANGELOG_SETTING_KEYS['cache_max_bytes']}: must be positive, "
                              f"got {max_bytes}")
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()  # file name -> size, LRU first
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{CHANGELOG_SETTING_KEYS['cache_dir']}: cannot create segment cache "
                              f"directory {directory!r}: {exc}") from exc
        self._load()

    @classmethod
    def from_settings(cls, settings: ChangelogSettings) -> SegmentCache | None:
        """The cache the settings ask for, or None when `cache_dir` is not set."""
        if settings.cache_dir is None:
            return None
        return cls(settings.cache_dir, settings.cache_max_bytes)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, url: str, offset: int, length: int) -> bytes | None:
        """The cached bytes of the range, or None; an entry of the wrong size is dropped."""
        name = _entry_name(url, offset, length)
        try:
            with open(self._path(name), "rb") as handle:
                data = handle.read()
        except FileNotFoundError:  # never cached, or evicted by another process
            self._forget(name, miss=True)
            return None
        if len(data) != length:
            log.warning("segment cache entry %s of %s has %d bytes, expected %d; dropped",
                        name, url, len(data), length)
            self._forget(name, miss=True)
            _remove(self._path(name))
            return None
        _touch(self._path(name))
        with self._lock:
            self._remember(name, length)
            self.hits += 1
        return data

    def put(self, url: str, offset: int, data: bytes | memoryview) -> None:
        """Store [offset, offset + len(data)); a range larger than the whole cache is not kept."""
        if len(data) > self.max_bytes:
            return
        name = _entry_name(url, offset, len(data))
        temp = self._path(f"{_TEMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
            os.replace(temp, self._path(name))
        except OSError as exc:
            # A cache that cannot write only costs a refetch; say so loudly and go on.
            log.warning("segment cache in %s cannot store %s at %d: %s", self.directory, url,
                        offset, exc)
            _remove(temp)
            return
        with self._lock:
            self._remember(name, len(data))
            victims = self._evictions()
        for victim in victims:
            _remove(self._path(victim))

    def drop(self, url: str, offset: int, length: int) -> None:
        name = _entry_name(url, offset, length)
        self._forget(name)
        _remove(self._path(name))

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _remember(self, name: str, size: int) -> None:
        previous = self._entries.pop(name, None)
        if previous is not None:
            self._bytes -= previous
        self._entries[name] = size
        self._bytes += size

    def _forget(self, name: str, miss: bool = False) -> None:
        with self._lock:
            self.misses += miss
            size = self._entries.pop(name, None)
            if size is not None:
                self._bytes -= size

    def _evictions(self) -> list[str]:
        victims = []
        while self._bytes > self.max_bytes and self._entries:
            name, size = self._entries.popitem(last=False)
            self._bytes -= size
            victims.append(name)
        return victims

    def _load(self) -> None:
        """Adopt entries already on disk, oldest use first; clear stale temp files."""
        found: list[tuple[float, str, int]] = []
        now = time.time()
        with os.scandir(self.directory) as scan:
            for entry in scan:
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                if entry.name.startswith(_TEMP_PREFIX):
                    if now - stat.st_mtime > STALE_TEMP_SECONDS:
                        _remove(entry.path)
                elif entry.name.endswith(_SUFFIX):
                    found.append((stat.st_mtime, entry.name, stat.st_size))
        with self._lock:
            for _, name, size in sorted(found):
                self._remember(name, size)
            victims = self._evictions()
        for victim in victims:
            _remove(self._path(victim))


def _entry_name(url: str, offset: int, length: int) -> str:
    digest = hashlib.sha256(f"{url}\n{offset}\n{length}".encode()).hexdigest()
    return digest + _SUFFIX


def _touch(path: str) -> None:
    """Mark an entry as just used, for LRU order across processes and restarts."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
