"""RemoteFiles: the slice of changelog's ChangelogService the materializer relies on."""

from __future__ import annotations

from typing import Protocol

from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.core.loop import EventLoopThread


class RemoteFiles(Protocol):
    """Retrying, create-only object access plus the loop it runs on.

    A structural type, so `changelog.changelog_service.ChangelogService` fits without the
    materializer importing it. Paths are keys relative to the storage root.
    """

    @property
    def loop(self) -> EventLoopThread: ...

    async def aput(self, path: str, data: bytes, *, hedge: bool = False) -> str: ...

    async def aget(self, path: str, start: int = 0, end: int | None = None) -> bytes: ...

    async def alist(self, prefix: str) -> list[ObjectInfo]: ...

    async def adelete_many(self, paths: list[str]) -> None: ...
