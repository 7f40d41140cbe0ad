"""ChangelogService: one per process and storage root; owns the loop, scheduler and uploader.

Every storage call of the changelog, the materializer and the backend goes through here, so
they share one connection pool, one retry policy, one in-flight limit and one set of metrics.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import socket
import threading
import uuid
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    WriterClosedError,
)
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import ChangeSet
from pyspark_dstl.changelog.metrics import ChangelogMetrics
from pyspark_dstl.changelog.reader import ChangelogReader
from pyspark_dstl.changelog.refcounts import FileRefCounts
from pyspark_dstl.changelog.storage import open_storage
from pyspark_dstl.changelog.storage.base import ObjectInfo, check_key
from pyspark_dstl.changelog.upload.hedging import HedgeBudget, LatencyTracker
from pyspark_dstl.changelog.upload.limiter import InFlightLimiter
from pyspark_dstl.changelog.upload.retry import RetryPolicy
from pyspark_dstl.changelog.upload.scheduler import BatchScheduler
from pyspark_dstl.changelog.upload.uploader import Uploader
from pyspark_dstl.changelog.writer import ChangelogWriter, WriterServices
from pyspark_dstl.core.loop import EventLoopThread

T = TypeVar("T")
log = logging.getLogger(__name__)
DEFAULT_SETTINGS = ChangelogSettings()


def default_writer_id() -> str:
    """Who wrote a file, as recorded in its header: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ChangelogService:
    """Creates writers and gives retried, create-only access to the objects under `url`."""

    def __init__(self, url: str, settings: ChangelogSettings = DEFAULT_SETTINGS, *,
                 writer_id: str | None = None) -> None:
        self.url = url
        self.settings = settings
        self.writer_id = writer_id or default_writer_id()
        self.metrics = ChangelogMetrics()
        self.storage = open_storage(url, settings)
        self.loop = EventLoopThread(name="dstl-changelog")
        self.retry = RetryPolicy(settings, self.metrics)
        self.tracker = LatencyTracker(settings)
        self.uploader = Uploader(self.storage, settings, self.metrics, self.retry, self.tracker,
                                 HedgeBudget(settings.hedge_budget))
        self.limiter = InFlightLimiter(settings.max_in_flight_bytes, self.metrics,
                                       self.loop.in_loop_thread)
        self.refs = FileRefCounts()
        self.scheduler = BatchScheduler(self.loop, self.uploader, self.limiter, self.refs,
                                        self.metrics, settings, self.writer_id)
        self._services = WriterServices(settings, self.loop, self.scheduler, self.limiter,
                                        self.refs, self.metrics, self._is_closed, self._forget)
        self._lock = threading.Lock()
        self._writers: dict[str, ChangelogWriter] = {}
        self._reader: SyncReader | None = None
        self._closed = False

    # --- writers and readers ------------------------------------------------------------------

    def create_writer(self, log_id: str, *, directory: str = "",
                      initial_sqn: int = 0) -> ChangelogWriter:
        """A writer for `log_id`, whose files go under `directory` (relative to the root)."""
        if not isinstance(log_id, str) or not log_id:
            raise ChangelogError(f"log id must be a non-empty str, got {log_id!r}")
        with self._lock:
            if self._closed:
                raise WriterClosedError(f"changelog storage {self.url!r} is closed")
            if log_id in self._writers:
                raise ChangelogError(f"log {log_id!r} already has an open writer on "
                                     f"{self.url!r}; close it first")
            writer = ChangelogWriter(self._services, log_id, directory=directory,
                                     initial_sqn=initial_sqn)
            self._writers[log_id] = writer
        return writer

    def reader(self) -> SyncReader:
        """One shared reader (and segment cache, when configured) per storage."""
        with self._lock:
            if self._reader is None:
                self._reader = SyncReader(self)
            return self._reader

    # --- objects, with the retry policy -------------------------------------------------------

    async def aput(self, path: str, data: bytes, *, hedge: bool = False) -> str:
        """Create `path` (never overwrite); the MD5 hex ETag; UploadFailedError when it gives up."""
        return await self._on_loop(self.uploader.upload(path, data, hedge=hedge))

    async def aget(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._on_loop(self._get(path, start, end))

    async def alist(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._on_loop(self.retry.call(lambda _: self.storage.list(prefix),
                                                   path=prefix, what="list"))

    async def adelete_many(self, paths: Sequence[str]) -> None:
        keys = [check_key(path) for path in paths]
        if keys:
            await self._on_loop(self.retry.call(lambda _: self.storage.delete_many(keys),
                                                path=keys[0], what="delete"))

    async def acopy(self, source: str, dest: str) -> None:
        """Create `dest` as a storage-side copy of `source` (never overwrite), with the retry
        policy. An attempt after the first that finds `dest` existing accepts it when it
        holds the bytes of `source` (an earlier attempt of ours landed, its answer lost)."""
        check_key(source)
        check_key(dest)

        async def attempt(number: int) -> None:
            self.metrics.inc("requests")
            try:
                await self.storage.copy(source, dest)
            except ObjectExistsError:
                if number == 1 or not await self._same_object(source, dest):
                    raise

        await self._on_loop(self.retry.call(attempt, path=dest, what="copy"))
        self.metrics.inc("copies")

    async def _same_object(self, source: str, dest: str) -> bool:
        first, second = await self.storage.head(source), await self.storage.head(dest)
        if first.size != second.size:
            return False
        if first.etag is not None and second.etag is not None:
            return first.etag == second.etag
        return await self.storage.get(source) == await self.storage.get(dest)

    async def aremove_incomplete_uploads(self, prefix: str, grace: float, *,
                                         dry_run: bool = False) -> builtins.list[ObjectInfo]:
        """Remove leftovers of uploads killed halfway under `prefix`, older than `grace` s."""
        return await self._on_loop(self.retry.call(
            lambda _: self.storage.remove_incomplete_uploads(prefix, grace, dry_run=dry_run),
            path=prefix, what="removal of incomplete uploads"))

    def put(self, path: str, data: bytes, *, hedge: bool = False) -> str:
        return self._run(self.aput(path, data, hedge=hedge))

    def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        return self._run(self.aget(path, start, end))

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return self._run(self.alist(prefix))

    def copy(self, source: str, dest: str) -> None:
        self._run(self.acopy(source, dest))

    def delete_many(self, paths: Sequence[str]) -> None:
        self._run(self.adelete_many(paths))

    async def _get(self, path: str, start: int, end: int | None) -> bytes:
        return await self.retry.call(lambda _: self.storage.get(path, start, end), path=path,
                                     what="read")

    async def _fetch(self, path: str, start: int, end: int) -> bytes:
        return await self._get(path, start, end)

    # --- lifecycle ----------------------------------------------------------------------------

    def metrics_snapshot(self) -> dict[str, Any]:
        snapshot = self.metrics.snapshot()
        snapshot["writers"] = len(self._writers)
        snapshot["hedge_delay"] = self.tracker.hedge_delay()
        return snapshot

    def close(self, timeout: float | None = None) -> None:
        """Upload what is queued, wait for uploads in flight (bounded), release everything."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            writers = builtins.list(self._writers.values())
        bound = self._close_bound() if timeout is None else timeout
        log.debug("closing changelog storage %r (%d writers open)", self.url, len(writers))
        self.scheduler.close()
        try:
            self.loop.run(self._aclose(bound))
        finally:
            self.limiter.close()
            self.loop.close()

    async def _aclose(self, bound: float) -> None:
        try:
            async with asyncio.timeout(bound):
                await self.scheduler.aflush()
        except TimeoutError:
            log.warning("changelog storage %r closed with uploads still in flight after %.1fs",
                        self.url, bound)
        finally:
            await self.storage.close()

    def _close_bound(self) -> float:
        """Long enough for a queued upload to use every attempt and backoff it has."""
        settings = self.settings
        return (settings.persist_delay
                + settings.max_attempts * (settings.attempt_timeout + settings.backoff_max))

    def __enter__(self) -> ChangelogService:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _is_closed(self) -> bool:
        return self._closed

    def _forget(self, writer: ChangelogWriter) -> None:
        with self._lock:
            if self._writers.get(writer.log_id) is writer:
                del self._writers[writer.log_id]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise WriterClosedError(f"changelog storage {self.url!r} is closed")
        return self.loop.run(coro)

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` on the storage's loop, where the store's connections live."""
        if self._closed:
            coro.close()
            raise WriterClosedError(f"changelog storage {self.url!r} is closed")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop.loop:
            return await coro
        return await asyncio.wrap_future(self.loop.submit(coro))


class SyncReader:
    """Reads handles back through the storage's loop, with the retry policy on every fetch."""

    def __init__(self, storage: ChangelogService) -> None:
        self._storage = storage
        self._reader = ChangelogReader(storage.storage, storage.settings, fetch=storage._fetch)

    def read(self, handle: ChangelogHandle) -> list[ChangeSet]:
        return self._storage._run(self._reader.aread(handle))

    async def aread(self, handle: ChangelogHandle) -> list[ChangeSet]:
        return await self._storage._on_loop(self._reader.aread(handle))
