"""FsspecStorage: any other fsspec protocol, through fsspec's blocking API in worker threads.

Create-only is only as strong as the protocol: an existence check, then an exclusive-create
open ('xb') where the file system supports it, else a temp name moved into place. Both leave
a window in which a racing writer can win; see docs/storage.md.
"""

from __future__ import annotations

import builtins
import logging
import time
import uuid
import warnings
from typing import Any

from pyspark_dstl.changelog.changelog_errors import (
    NonAtomicStorageWarning,
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageError,
    TransientStorageError,
)
from pyspark_dstl.changelog.storage.base import ObjectInfo, check_key, check_range, md5_hex
from pyspark_dstl.changelog.storage.threaded import TEMP_PREFIX, ThreadedStorage, is_temp_name

log = logging.getLogger(__name__)


class FsspecStorage(ThreadedStorage):
    """Objects are files of `fs` under `root` (a path in the file system's own notation).
    Opening one warns (NonAtomicStorageWarning): its create-only write is not atomic."""

    def __init__(self, fs: Any, root: str, root_url: str) -> None:
        warnings.warn(
            f"storage {root_url.rstrip('/')!r}: fsspec's {_protocol(fs)!r} file system has no "
            f"atomic create-only write, so two writers racing for one file name can both "
            f"succeed and a fenced run is not stopped for sure; use file:// or s3:// for "
            f"checkpoints, or make sure only one run writes this root (docs/storage.md)",
            NonAtomicStorageWarning, stacklevel=3)
        self.fs = fs
        self.root = root.rstrip("/")
        self.root_url = root_url.rstrip("/")
        self._exclusive: bool | None = None  # learnt on first create: does 'xb' work?

    _FAILURES = (Exception,)  # whatever a protocol raises: classified, never passed on raw

    def _location(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def _classify(self, exc: Exception, path: str) -> StorageError:
        return _classify(exc, path, self.url_of(path))

    async def put_if_absent(self, path: str, data: bytes) -> str:
        full = self._location(path)
        await self._run(path, lambda: self._create(path, full, data))
        return md5_hex(data)

    def _create(self, path: str, full: str, data: bytes) -> None:
        if self.fs.exists(full):
            raise ObjectExistsError(f"object {self.url_of(path)!r} already exists", path)
        parent = full.rpartition("/")[0]
        self.fs.makedirs(parent, exist_ok=True)
        if self._exclusive is not False:
            try:
                handle = self.fs.open(full, "xb")
            except FileExistsError as exc:
                raise ObjectExistsError(
                    f"object {self.url_of(path)!r} already exists", path) from exc
            except (ValueError, NotImplementedError):
                if self._exclusive:
                    raise
                self._exclusive = False  # the protocol has no exclusive create
            else:
                self._exclusive = True
                self._write_new(handle, full, data)
                return
        temp = f"{parent}/{TEMP_PREFIX}{uuid.uuid4().hex}"
        self.fs.pipe_file(temp, data)
        try:
            if self.fs.exists(full):
                raise ObjectExistsError(f"object {self.url_of(path)!r} already exists", path)
            self.fs.mv(temp, full)
        finally:
            if self.fs.exists(temp):
                self.fs.rm_file(temp)

    def _write_new(self, handle: Any, full: str, data: bytes) -> None:
        """Write through an exclusive handle; a failed write must not leave a partial object."""
        try:
            with handle:
                handle.write(data)
        except BaseException:
            if self.fs.exists(full):
                self.fs.rm_file(full)
            raise

    async def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        full = self._location(path)
        check_range(path, start, end)
        data = await self._run(path, lambda: self.fs.cat_file(full, start=start, end=end))
        return bytes(data)

    async def head(self, path: str) -> ObjectInfo:
        full = self._location(path)
        info = await self._run(path, lambda: self.fs.info(full))
        if info.get("type") == "directory":
            raise ObjectNotFoundError(f"{self.url_of(path)!r} is not an object", path)
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"') or None
        return ObjectInfo(path, int(info["size"]), etag)

    def _list_files(self, start: str, prefix: str) -> builtins.list[ObjectInfo]:
        found = [ObjectInfo(key, int(info["size"])) for key, _, info in self._scan(start, prefix)
                 if not is_temp_name(key)]
        found.sort(key=lambda item: item.path)
        return found

    def _scan(self, start: str, prefix: str) -> builtins.list[tuple[str, str, dict[str, Any]]]:
        """(key, full name, fsspec info) of every file under `start` whose key has `prefix`."""
        try:
            entries = self.fs.find(start, detail=True)
        except FileNotFoundError:
            return []
        base = self.fs._strip_protocol(self.root).rstrip("/") + "/"
        found = []
        for name, info in entries.items():
            key = self.fs._strip_protocol(name)[len(base):]
            if key.startswith(prefix):
                found.append((key, name, info))
        return found

    def _sweep(self, start: str, prefix: str, grace: float,
               dry_run: bool) -> builtins.list[ObjectInfo]:
        cutoff = time.time() - grace
        found: list[ObjectInfo] = []
        for key, name, info in self._scan(start, prefix):
            if not is_temp_name(key):
                continue
            try:
                modified = self.fs.modified(name)
            except FileNotFoundError:
                continue  # moved into place (or removed) meanwhile
            except NotImplementedError:
                log.warning("leaving %s: the %s file system does not report modification "
                            "times, so its age is unknown", self.url_of(key), self.fs.protocol)
                continue
            if modified.tzinfo is None:
                log.warning("leaving %s: its modification time has no time zone",
                            self.url_of(key))
                continue
            if modified.timestamp() >= cutoff:
                continue
            if not dry_run:
                try:
                    self.fs.rm_file(name)
                except FileNotFoundError:
                    continue
            found.append(ObjectInfo(key, int(info["size"])))
        found.sort(key=lambda item: item.path)
        return found

    async def delete(self, path: str) -> None:
        full = self._location(path)

        def remove() -> None:
            try:
                self.fs.rm_file(full)
            except FileNotFoundError:
                return

        await self._run(path, remove)


def _classify(exc: Exception, path: str, url: str) -> StorageError:
    """Unknown failures are not retried: only connection errors and timeouts are transient."""
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"object {url!r} does not exist", path)
    if isinstance(exc, FileExistsError):
        return ObjectExistsError(f"object {url!r} already exists", path)
    if isinstance(exc, ConnectionError | TimeoutError):
        return TransientStorageError(f"fsspec I/O on {url!r} failed, may succeed later: {exc}",
                                     path)
    return PermanentStorageError(f"fsspec I/O on {url!r} failed ({type(exc).__name__}): {exc}",
                                 path)


def _protocol(fs: Any) -> str:
    protocol = getattr(fs, "protocol", "fsspec")
    return str(protocol[0] if isinstance(protocol, tuple | list) else protocol)
