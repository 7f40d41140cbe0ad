"""One batching scheduler per storage: drains every writer's queued change sets into few files.

A persist only queues; the drain runs `persist_delay` after the first queued change set (or at
once past `persist_size_threshold`), so writers persisting together share one request. One
drain writes one file per writer directory, each writer's change sets contiguous in SQN order.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from dataclasses import dataclass

from pyspark_dstl.changelog.changelog_errors import UploadFailedError, WriterClosedError
from pyspark_dstl.changelog.changelog_handle import Segment
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import ChangeSet, LogHeader, encode_file
from pyspark_dstl.changelog.metrics import ChangelogMetrics
from pyspark_dstl.changelog.refcounts import FileRefCounts
from pyspark_dstl.changelog.storage.base import join_key
from pyspark_dstl.changelog.upload.limiter import InFlightLimiter
from pyspark_dstl.changelog.upload.tickets import TicketOwner, UploadTicket
from pyspark_dstl.changelog.upload.uploader import Uploader
from pyspark_dstl.core.loop import EventLoopThread

log = logging.getLogger(__name__)
ENCODE_IN_THREAD_BYTES = 1024 * 1024
"""Files at least this large are encoded off the event loop so other uploads keep moving."""
FILE_SUFFIX = ".changelog"


class BatchScheduler:
    """Queue -> drain -> one file per directory -> upload; at most `max_concurrent_uploads` drains.

    Tickets arrive from any thread (their bytes already admitted by the limiter); everything
    else runs on the storage's event loop.
    """

    def __init__(self, loop: EventLoopThread, uploader: Uploader, limiter: InFlightLimiter,
                 refs: FileRefCounts, metrics: ChangelogMetrics, settings: ChangelogSettings,
                 writer_id: str) -> None:
        self._loop = loop
        self._uploader = uploader
        self._limiter = limiter
        self._refs = refs
        self._metrics = metrics
        self._settings = settings
        self._writer_id = writer_id
        self._lock = threading.Lock()
        self._queue: list[UploadTicket] = []
        self._queued_bytes = 0
        self._closed = False
        # loop-thread state
        self._slots = asyncio.Semaphore(settings.max_concurrent_uploads)
        self._timer: asyncio.TimerHandle | None = None
        self._drain_waiting = False
        self._flushing = False
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, ticket: UploadTicket) -> None:
        """Queue a ticket (thread-safe); its future resolves once its file is uploaded."""
        with self._lock:
            if self._closed:
                raise WriterClosedError("the changelog storage is closed: no more uploads")
            self._queue.append(ticket)
            self._queued_bytes += ticket.size
            self._publish_queue_locked()
        self._loop.call_soon(self._wake)

    def _publish_queue_locked(self) -> None:
        self._metrics.set_gauge("queue_length", len(self._queue))
        self._metrics.set_gauge("queued_bytes", self._queued_bytes)

    def _wake(self) -> None:
        if self._drain_waiting:
            return  # a drain is waiting for a slot and will take everything queued
        with self._lock:
            full = self._queued_bytes >= self._settings.persist_size_threshold
        if full or self._flushing:
            self._start_drain()
        elif self._timer is None:
            self._timer = self._loop.loop.call_later(self._settings.persist_delay,
                                                     self._start_drain)

    def _start_drain(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._drain_waiting:
            return
        self._drain_waiting = True
        task = self._loop.loop.create_task(self._drain())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain(self) -> None:
        async with self._slots:
            self._drain_waiting = False
            with self._lock:
                tickets, self._queue, self._queued_bytes = self._queue, [], 0
                self._publish_queue_locked()
            if not tickets:
                return
            self._metrics.inc("drains")
            groups: dict[str, list[UploadTicket]] = {}
            for ticket in tickets:
                groups.setdefault(ticket.owner.directory, []).append(ticket)
            await asyncio.gather(*(self._upload_file(directory, group)
                                   for directory, group in groups.items()))

    async def _upload_file(self, directory: str, tickets: list[UploadTicket]) -> None:
        by_owner: dict[TicketOwner, list[ChangeSet]] = {}
        for ticket in tickets:
            by_owner.setdefault(ticket.owner, []).extend(ticket.change_sets)
        owners = list(by_owner)
        stem = owners[0].claim_file_stem() if len(owners) == 1 else None
        path = join_key(directory, (stem or uuid.uuid4().hex) + FILE_SUFFIX)
        logs = [(owner.log_header(), sorted(sets, key=lambda cs: cs.sqn))
                for owner, sets in by_owner.items()]
        count = sum(len(sets) for sets in by_owner.values())
        try:
            data, frames = await self._encode(logs, sum(t.size for t in tickets))
            await self._uploader.upload(path, data, hedge=True)
        except BaseException as exc:
            self._fail(path, tickets, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            for ticket in tickets:
                self._limiter.release(ticket.size)
        self._metrics.file_written(len(owners), count)
        log.debug("uploaded %r: %d log(s), %d change set(s), %d bytes",
                  path, len(owners), count, len(data))
        self._refs.register(path, count)
        for ticket in tickets:
            try:
                segments = {cs.sqn: frames[(cs.log_id, cs.sqn)].with_path(path)
                            for cs in ticket.change_sets}
                ticket.owner.on_ticket_uploaded(ticket, path, segments)
            except Exception as exc:  # a bug, but no persist may wait forever on it
                log.exception("bookkeeping of uploaded %r failed", path)
                ticket.future.set_exception(exc)
            else:
                ticket.future.set_result(segments)

    async def _encode(self, logs: list[tuple[LogHeader, list[ChangeSet]]],
                      size: int) -> tuple[bytes, dict[tuple[str, int], _Frame]]:
        settings = self._settings

        def encode() -> tuple[bytes, dict[tuple[str, int], _Frame]]:
            encoded = encode_file(self._writer_id, logs, settings.compression,
                                  settings.compression_level)
            frames = {(f.log_id, f.sqn): _Frame(f.sqn, f.offset, f.length, f.key_groups)
                      for f in encoded.frames}
            return encoded.data, frames

        if size >= ENCODE_IN_THREAD_BYTES:
            return await asyncio.to_thread(encode)
        return encode()

    def _fail(self, path: str, tickets: list[UploadTicket], exc: BaseException) -> None:
        if isinstance(exc, UploadFailedError):
            error = exc
        else:
            error = UploadFailedError(f"upload of {path!r} failed: {exc!r}", path)
            error.__cause__ = exc
        if not isinstance(exc, UploadFailedError):  # the uploader counts its own failures
            self._metrics.inc("upload_failures")
        log.warning("changelog upload of %r failed; its change sets wait for a later persist: "
                    "%s", path, exc)
        for ticket in tickets:
            ticket.owner.on_ticket_failed(ticket)
            ticket.future.set_exception(error)

    async def aflush(self) -> None:
        """Drain the queue now and wait for every upload in flight (bound it from outside)."""
        self._flushing = True
        try:
            with self._lock:
                queued = bool(self._queue)
            if queued:
                self._start_drain()
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            self._flushing = False

    def close(self) -> None:
        """Refuse new tickets; tickets already queued are still drained by aflush."""
        with self._lock:
            self._closed = True

    @property
    def queue_length(self) -> int:
        with self._lock:
            return len(self._queue)


@dataclass(frozen=True)
class _Frame:
    sqn: int
    offset: int
    length: int
    key_groups: tuple[int, ...]

    def with_path(self, path: str) -> Segment:
        return Segment(self.sqn, self.sqn + 1, path, self.offset, self.length, self.key_groups)
