"""The body shared by storages over a blocking API (local files, fsspec): every call runs in a
worker thread and its failures are classified in one place; a write goes through a temp name,
which listings never show and `remove_incomplete_uploads` sweeps once it is old enough."""

from __future__ import annotations

import asyncio
import builtins
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark_dstl.changelog.changelog_errors import StorageError
from pyspark_dstl.changelog.storage.base import ObjectInfo, Storage, check_grace

TEMP_PREFIX = ".tmp-"
T = TypeVar("T")


def is_temp_name(key: str) -> bool:
    """Whether a key's last part names a write not yet moved into place."""
    return key.rpartition("/")[2].startswith(TEMP_PREFIX)


class ThreadedStorage(Storage):
    """A storage whose calls block: each runs in a worker thread. A subclass says where a key
    lives (`_location`), what its failures mean (`_classify`) and how it lists and sweeps a
    folder; `root` is the location of the empty key."""

    root: Any
    _FAILURES: tuple[type[Exception], ...] = (OSError,)  # what `_classify` turns into errors

    @abstractmethod
    def _location(self, key: str) -> Any:
        """Where the (checked) key lives, in the blocking API's own terms."""

    @abstractmethod
    def _classify(self, exc: Exception, path: str) -> StorageError:
        """The storage error a failure of the blocking API at `path` means."""

    @abstractmethod
    def _list_files(self, start: Any, prefix: str) -> builtins.list[ObjectInfo]:
        """Every object below `start` whose key starts with `prefix` (temp names left out),
        sorted by key."""

    @abstractmethod
    def _sweep(self, start: Any, prefix: str, grace: float,
               dry_run: bool) -> builtins.list[ObjectInfo]:
        """The temp files below `start` under `prefix` older than `grace`, removed unless
        `dry_run`, sorted by key."""

    async def _run(self, path: str, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except StorageError:
            raise
        except self._FAILURES as exc:
            raise self._classify(exc, path) from exc

    def _start(self, prefix: str) -> Any:
        """Where a listing of `prefix` starts: the folder up to its last '/'."""
        directory = prefix.rpartition("/")[0]
        return self._location(directory) if directory else self.root

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        start = self._start(prefix)
        return await self._run(prefix, lambda: self._list_files(start, prefix))

    async def remove_incomplete_uploads(self, prefix: str, grace: float, *,
                                        dry_run: bool = False) -> builtins.list[ObjectInfo]:
        """Temp files under `prefix` last written more than `grace` seconds ago.

        A live write renews its temp file and moves it into place within one attempt;
        removing one anyway cannot damage an object, it only fails that attempt.
        """
        check_grace(grace)
        start = self._start(prefix)
        return await self._run(prefix, lambda: self._sweep(start, prefix, grace, dry_run))
