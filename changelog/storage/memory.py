"""MemoryStorage: objects in a process-global dict per name, so two opens of one URL share them.

Meant for tests and single-process experiments: nothing survives the process.
"""

from __future__ import annotations

import builtins
import threading

from pyspark_dstl.changelog.changelog_errors import ObjectExistsError, ObjectNotFoundError
from pyspark_dstl.changelog.storage.base import (
    ObjectInfo,
    Storage,
    check_key,
    check_range,
    md5_hex,
)


class _Space:
    """The objects of one `memory://name`, guarded by one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


def _space(name: str) -> _Space:
    with _SPACES_LOCK:
        space = _SPACES.get(name)
        if space is None:
            space = _SPACES[name] = _Space()
        return space


class MemoryStorage(Storage):
    """`memory://name[/prefix]`; keys live under `prefix` inside the named space."""

    def __init__(self, name: str, prefix: str = "") -> None:
        self.name = name
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.root_url = f"memory://{name}" + (f"/{self.prefix}" if self.prefix else "")
        self._space = _space(name)

    @classmethod
    def drop(cls, name: str) -> None:
        """Forget every object of `memory://name` (tests use one unique name each)."""
        with _SPACES_LOCK:
            _SPACES.pop(name, None)

    def _full(self, path: str) -> str:
        check_key(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    async def put_if_absent(self, path: str, data: bytes) -> str:
        full = self._full(path)
        with self._space.lock:
            if full in self._space.objects:
                raise ObjectExistsError(f"object {self.url_of(path)!r} already exists", path)
            self._space.objects[full] = bytes(data)
        return md5_hex(data)

    async def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        full = self._full(path)
        check_range(path, start, end)
        with self._space.lock:
            data = self._space.objects.get(full)
        if data is None:
            raise ObjectNotFoundError(f"object {self.url_of(path)!r} does not exist", path)
        return data[start:end]

    async def head(self, path: str) -> ObjectInfo:
        full = self._full(path)
        with self._space.lock:
            data = self._space.objects.get(full)
        if data is None:
            raise ObjectNotFoundError(f"object {self.url_of(path)!r} does not exist", path)
        return ObjectInfo(path, len(data), md5_hex(data))

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        base = f"{self.prefix}/" if self.prefix else ""
        wanted = base + prefix
        with self._space.lock:
            found = [(key, data) for key, data in self._space.objects.items()
                     if key.startswith(wanted)]
        found.sort()
        return [ObjectInfo(key[len(base):], len(data), md5_hex(data)) for key, data in found]

    async def delete(self, path: str) -> None:
        full = self._full(path)
        with self._space.lock:
            self._space.objects.pop(full, None)

    async def delete_many(self, paths: builtins.list[str]) -> None:
        fulls = [self._full(path) for path in paths]
        with self._space.lock:
            for full in fulls:
                self._space.objects.pop(full, None)
