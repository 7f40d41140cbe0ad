"""LocalStorage: a directory tree; create-only through a hard link, which never replaces a file.

A temp file is written and fsynced first, then linked to the final name: the final name either
does not exist or holds the complete bytes. Blocking calls run in worker threads.
`head`/`list` report sizes only (etag None): `holds` then compares bytes.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from pyspark_dstl.changelog.changelog_errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageError,
    TransientStorageError,
    UnsupportedStorageError,
)
from pyspark_dstl.changelog.storage.base import ObjectInfo, check_key, check_range, md5_hex
from pyspark_dstl.changelog.storage.threaded import TEMP_PREFIX, ThreadedStorage
from pyspark_dstl.core.local_files import sync_directory

_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT}
_NO_LINK_ERRNOS = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


class LocalStorage(ThreadedStorage):
    """Objects are files under `root`; keys map to relative paths."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(root))
        self.root_url = self.root.as_uri()

    def _location(self, key: str) -> Path:
        return self.root / check_key(key)

    def _classify(self, exc: Exception, path: str) -> StorageError:
        return _classify(exc, path, self.url_of(path))

    async def put_if_absent(self, path: str, data: bytes) -> str:
        target = self._location(path)

        def create() -> str:
            self._create(path, target, data)
            return md5_hex(data)  # in the worker: hashlib lets go of the GIL on large data

        return await self._run(path, create)

    def _create(self, path: str, target: Path, data: bytes) -> None:
        parent = target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as exc:
            raise PermanentStorageError(
                f"cannot create {self.url_of(path)!r}: a parent of it is a file; move that "
                f"file away or choose another checkpoint location", path) from exc
        temp = parent / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        try:
            with open(temp, "xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(temp, target)
            except FileExistsError as exc:
                raise ObjectExistsError(
                    f"object {self.url_of(path)!r} already exists", path) from exc
            except OSError as exc:
                if exc.errno in _NO_LINK_ERRNOS:
                    raise UnsupportedStorageError(
                        f"cannot create {self.url_of(path)!r}: the file system does not support "
                        "hard links, which create-only writes need; put the checkpoint on a "
                        "local file system that has them (ext4, xfs, apfs) or on s3://", path
                    ) from exc
                raise
        finally:
            temp.unlink(missing_ok=True)
        sync_directory(parent)

    async def copy(self, source: str, dest: str) -> None:
        """A hard link (no byte is copied; the objects are immutable); where the file system
        cannot link the two, a copy made under a temp name and linked in, like a create."""
        origin, target = self._location(source), self._location(dest)

        def link() -> None:
            if not origin.is_file():
                raise ObjectNotFoundError(f"object {self.url_of(source)!r} does not exist",
                                          source)
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError) as exc:
                raise PermanentStorageError(
                    f"cannot create {self.url_of(dest)!r}: a parent of it is a file; move that "
                    f"file away or choose another checkpoint location", dest) from exc
            try:
                os.link(origin, target)
            except FileExistsError as exc:
                raise ObjectExistsError(f"object {self.url_of(dest)!r} already exists",
                                        dest) from exc
            except OSError as exc:
                if exc.errno not in _NO_LINK_ERRNOS | {errno.EMLINK, errno.EPERM}:
                    raise
                self._create(dest, target, origin.read_bytes())
                return
            sync_directory(target.parent)

        await self._run(dest, link)

    async def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        file = self._location(path)
        check_range(path, start, end)

        def read() -> bytes:
            with open(file, "rb") as handle:
                handle.seek(start)
                return handle.read() if end is None else handle.read(end - start)

        return await self._run(path, read)

    async def head(self, path: str) -> ObjectInfo:
        file = self._location(path)

        def stat() -> ObjectInfo:
            st = file.stat()
            if not file.is_file():
                raise ObjectNotFoundError(f"{self.url_of(path)!r} is not an object", path)
            return ObjectInfo(path, st.st_size)

        return await self._run(path, stat)

    def _list_files(self, start: Path, prefix: str) -> builtins.list[ObjectInfo]:
        found: list[ObjectInfo] = []
        for dirpath, files in _directories(start):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not key.startswith(prefix):
                    continue
                try:
                    size = os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue  # deleted while listing
                found.append(ObjectInfo(key, size))
        found.sort(key=lambda info: info.path)
        return found

    def _sweep(self, start: Path, prefix: str, grace: float,
               dry_run: bool) -> builtins.list[ObjectInfo]:
        cutoff = time.time() - grace
        found: list[ObjectInfo] = []
        for dirpath, files in _directories(start):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in files:
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not name.startswith(TEMP_PREFIX) or not key.startswith(prefix):
                    continue
                file = os.path.join(dirpath, name)
                try:
                    stat = os.stat(file)
                    if stat.st_mtime >= cutoff:
                        continue
                    if not dry_run:
                        os.remove(file)
                except FileNotFoundError:
                    continue  # the upload finished (or another sweep won) meanwhile
                found.append(ObjectInfo(key, stat.st_size))
        found.sort(key=lambda info: info.path)
        return found

    async def delete(self, path: str) -> None:
        await self.delete_many([path])

    async def delete_many(self, paths: builtins.list[str]) -> None:
        files = [(path, self._location(path)) for path in paths]

        def unlink_all() -> None:
            for path, file in files:
                try:
                    file.unlink(missing_ok=True)
                except IsADirectoryError:
                    continue  # a directory is not an object: nothing to delete
                except OSError as exc:
                    raise _classify(exc, path, self.url_of(path)) from exc

        await asyncio.to_thread(unlink_all)


def _directories(start: Path) -> Iterator[tuple[str, builtins.list[str]]]:
    """(directory, file names) under `start`, following symbolic links to directories as
    reads do (a key names what a read of it opens); a directory reached twice (a link loop,
    or two links to one directory) would give one file two keys, so it is refused."""
    seen: dict[tuple[int, int], str] = {}
    for dirpath, dirs, files in os.walk(start, followlinks=True):
        try:
            stat = os.stat(dirpath)
        except FileNotFoundError:
            continue  # removed while listing
        identity = (stat.st_dev, stat.st_ino)
        if identity in seen:
            dirs.clear()
            raise PermanentStorageError(
                f"directory {dirpath!r} is the directory {seen[identity]!r} reached again "
                f"through a symbolic link: one file would have two names", dirpath)
        seen[identity] = dirpath
        yield dirpath, files


def _classify(exc: Exception, path: str, url: str) -> StorageError:
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return ObjectNotFoundError(f"object {url!r} does not exist", path)
    if getattr(exc, "errno", None) in _TRANSIENT_ERRNOS:
        return TransientStorageError(f"local I/O on {url!r} failed, may succeed later: {exc}",
                                     path)
    return PermanentStorageError(f"local I/O on {url!r} failed: {exc}", path)
