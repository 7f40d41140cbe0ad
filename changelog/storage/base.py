"""Storage: the few async operations the log needs from any storage, all create-only."""

from __future__ import annotations

import builtins
import hashlib
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from pyspark_dstl.changelog.changelog_errors import ObjectNotFoundError, PermanentStorageError


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object. `path` is relative to the store root; `etag` is the MD5 hex if known."""

    path: str
    size: int
    etag: str | None = None


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def check_key(path: str) -> str:
    """Reject keys that could escape the root or alias another key; return the key unchanged."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PermanentStorageError(f"invalid storage key {path!r}", path)
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise PermanentStorageError(f"invalid storage key {path!r}: empty, '.' or '..' part",
                                    path)
    return path


def check_range(path: str, start: int, end: int | None) -> None:
    """Reject a negative start or an end before start; `path` is named in the error."""
    if start < 0 or (end is not None and end < start):
        raise PermanentStorageError(f"invalid byte range [{start}, {end}) for {path!r}", path)


def check_grace(grace: float) -> float:
    """Reject a negative or non-finite grace period of remove_incomplete_uploads."""
    if not math.isfinite(grace) or grace < 0:
        raise PermanentStorageError(f"grace period of incomplete uploads must be a finite "
                                    f"number of seconds >= 0, got {grace!r}")
    return grace


def join_key(*parts: str) -> str:
    """Join key parts with '/', ignoring empty parts and surplus slashes."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


class Storage(ABC):
    """Keys are '/'-separated paths relative to `root_url`; writes never overwrite."""

    root_url: str

    @abstractmethod
    async def put_if_absent(self, path: str, data: bytes) -> str:
        """Create `path` with `data` unless it exists; return the MD5 hex ETag.

        Raises ObjectExistsError when the name is taken, TransientStorageError when worth
        retrying, PermanentStorageError otherwise. Never leaves a partial object visible.
        """

    @abstractmethod
    async def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of `path` (end None: to the end); ObjectNotFoundError if absent."""

    @abstractmethod
    async def head(self, path: str) -> ObjectInfo:
        """Size and ETag of `path`; ObjectNotFoundError if absent."""

    @abstractmethod
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (recursively), sorted by key."""

    @abstractmethod
    async def delete(self, path: str) -> None:
        """Remove `path`; a missing path is not an error."""

    async def delete_many(self, paths: builtins.list[str]) -> None:
        for path in paths:
            await self.delete(path)

    async def copy(self, source: str, dest: str) -> None:
        """Create `dest` holding exactly the bytes of `source`, on the storage side where it
        can (a rescale gives a new store its own copy of an old store's files without sending
        them again); create-only like put_if_absent: ObjectExistsError when `dest` exists,
        ObjectNotFoundError when `source` does not. This default reads and writes them."""
        await self.put_if_absent(dest, await self.get(source))

    async def exists(self, path: str) -> bool:
        try:
            await self.head(path)
        except ObjectNotFoundError:
            return False
        return True

    async def holds(self, path: str, data: bytes) -> bool:
        """True when `path` exists with exactly `data` (used to accept a 412 on a hedge)."""
        try:
            info = await self.head(path)
        except ObjectNotFoundError:
            return False
        if info.size != len(data):
            return False
        if info.etag is not None and "-" not in info.etag:
            return info.etag == md5_hex(data)
        return await self.get(path) == data

    async def remove_incomplete_uploads(self, prefix: str, grace: float, *,
                                        dry_run: bool = False) -> builtins.list[ObjectInfo]:
        """Remove what uploads killed halfway left under `prefix`, if older than `grace` seconds.

        `list` never shows such leftovers (temp files of a write not yet linked in), so
        nothing else ever deletes them. Returns what was removed (or, with dry_run, would
        be). This default is for stores whose writes leave nothing behind (memory; S3, whose
        single PUTs are never partly visible and leave no multipart uploads to abort).
        """
        check_grace(grace)
        return []

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store must not be used afterwards."""

    def url_of(self, path: str) -> str:
        return self.root_url.rstrip("/") + "/" + path
