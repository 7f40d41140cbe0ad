"""ChangelogWriter: the FLIP-158 log of one state store, used from plain synchronous code.

Change sets move PENDING -> SCHEDULED (in a ticket the scheduler holds) -> UPLOADED (a segment
of a file). A failed upload moves them back to PENDING, so the next persist retries them.
The owner thread and the storage's event loop thread share that state under one lock per
writer; nothing blocks while holding it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from pyspark_dstl.changelog.changelog_errors import ChangelogError, SqnError, WriterClosedError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.format import MAX_KEY_GROUP, ChangeSet, LogHeader
from pyspark_dstl.changelog.metrics import ChangelogMetrics
from pyspark_dstl.changelog.refcounts import FileRefCounts
from pyspark_dstl.changelog.storage.base import check_key
from pyspark_dstl.changelog.upload.limiter import InFlightLimiter
from pyspark_dstl.changelog.upload.scheduler import BatchScheduler
from pyspark_dstl.changelog.upload.tickets import TicketOwner, UploadTicket
from pyspark_dstl.core.loop import EventLoopThread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterServices:
    """The parts of a ChangelogService a writer uses; shared by all writers of that storage."""

    settings: ChangelogSettings
    loop: EventLoopThread
    scheduler: BatchScheduler
    limiter: InFlightLimiter
    refs: FileRefCounts
    metrics: ChangelogMetrics
    is_closed: Callable[[], bool]
    forget: Callable[[ChangelogWriter], None]


class _Record:
    """One closed change set; its bytes are dropped once uploaded (the segment is enough)."""

    __slots__ = ("change_set", "segment", "size", "ticket")

    def __init__(self, change_set: ChangeSet) -> None:
        self.change_set: ChangeSet | None = change_set
        self.size = change_set.size
        self.ticket: UploadTicket | None = None
        self.segment: Segment | None = None


@dataclass
class _Plan:
    """What one persist waits for: segments already known and tickets still in flight."""

    from_sqn: int
    to_sqn: int
    segments: list[Segment]
    tickets: list[UploadTicket]
    new_ticket: UploadTicket | None


class _ChangeSets:
    """SQN bookkeeping of one log: the active set, closed sets and their upload state.

    Not thread-safe by itself: the writer calls every method under its lock.
    """

    def __init__(self, log_id: str, initial_sqn: int) -> None:
        self.log_id = log_id
        self.initial_sqn = initial_sqn
        self.active: list[tuple[int, bytes]] = []
        self.active_bytes = 0
        self.active_sqn = initial_sqn  # the SQN the active set gets when it closes
        self.lowest = initial_sqn
        self.records: dict[int, _Record] = {}
        self.pending_bytes = 0  # closed, not handed to the scheduler
        self.released: list[str] = []  # files whose last change set was truncated in flight

    def roll_over(self) -> None:
        if not self.active:
            return
        record = _Record(ChangeSet(self.log_id, self.active_sqn, tuple(self.active)))
        self.records[self.active_sqn] = record
        self.pending_bytes += record.size
        self.active, self.active_bytes = [], 0
        self.active_sqn += 1

    def ticket_for(self, owner: TicketOwner, records: list[_Record]) -> UploadTicket | None:
        if not records:
            return None
        change_sets = tuple(r.change_set for r in records if r.change_set is not None)
        ticket = UploadTicket(owner, change_sets, sum(r.size for r in records))
        for record in records:
            record.ticket = ticket
            self.pending_bytes -= record.size
        return ticket

    def take_pending(self, owner: TicketOwner) -> UploadTicket | None:
        self.roll_over()
        return self.ticket_for(owner, [r for r in self.records.values()
                                       if r.ticket is None and r.segment is None])

    def plan(self, owner: TicketOwner, from_sqn: int) -> _Plan:
        self.roll_over()
        to_sqn = self.active_sqn
        if from_sqn < self.lowest:
            raise SqnError(f"log {self.log_id!r}: cannot persist from SQN {from_sqn}: "
                           f"change sets below {self.lowest} were truncated")
        if from_sqn > to_sqn:
            raise SqnError(f"log {self.log_id!r}: cannot persist from SQN {from_sqn}: "
                           f"the next SQN is {to_sqn}")
        segments: list[Segment] = []
        tickets: dict[int, UploadTicket] = {}
        pending: list[_Record] = []
        for sqn in range(from_sqn, to_sqn):
            record = self.records[sqn]
            if record.segment is not None:
                segments.append(record.segment)
            elif record.ticket is not None:
                tickets[id(record.ticket)] = record.ticket
            else:
                pending.append(record)
        new_ticket = self.ticket_for(owner, pending)
        if new_ticket is not None:
            tickets[id(new_ticket)] = new_ticket
        return _Plan(from_sqn, to_sqn, segments, list(tickets.values()), new_ticket)

    def truncate(self, before_sqn: int, refs: FileRefCounts) -> list[str]:
        if before_sqn > self.active_sqn:
            raise SqnError(f"log {self.log_id!r}: cannot truncate before SQN {before_sqn}: "
                           f"the next SQN is {self.active_sqn}")
        released, self.released = self.released, []
        for sqn in range(self.lowest, before_sqn):
            record = self.records.pop(sqn)
            if record.segment is not None:
                if refs.drop(record.segment.path):
                    released.append(record.segment.path)
            elif record.ticket is None:
                self.pending_bytes -= record.size
        self.lowest = max(self.lowest, before_sqn)
        return list(dict.fromkeys(released))

    def uploaded(self, ticket: UploadTicket, path: str, segments: Mapping[int, Segment],
                 refs: FileRefCounts) -> None:
        for change_set in ticket.change_sets:
            record = self.records.get(change_set.sqn)
            if record is not None and record.ticket is ticket:
                record.ticket, record.segment = None, segments[change_set.sqn]
                record.change_set = None
            elif refs.drop(path):  # truncated while in flight
                self.released.append(path)

    def failed(self, ticket: UploadTicket) -> None:
        for change_set in ticket.change_sets:
            record = self.records.get(change_set.sqn)
            if record is not None and record.ticket is ticket:
                record.ticket = None
                self.pending_bytes += record.size

    def in_flight(self) -> list[concurrent.futures.Future[dict[int, Segment]]]:
        tickets = {id(r.ticket): r.ticket for r in self.records.values() if r.ticket}
        return [ticket.future for ticket in tickets.values()]

    def forget_all(self, refs: FileRefCounts) -> None:
        for record in self.records.values():
            if record.segment is not None:
                refs.drop(record.segment.path)
        self.records.clear()


class ChangelogWriter:
    """Appends go into the active change set; each non-empty set closes under one SQN."""

    def __init__(self, services: WriterServices, log_id: str, *, directory: str = "",
                 initial_sqn: int = 0) -> None:
        if directory:
            check_key(directory)
        if type(initial_sqn) is not int or initial_sqn < 0:
            raise SqnError(f"log {log_id!r}: initial SQN must be a non-negative int, "
                           f"got {initial_sqn!r}")
        self.log_id = log_id
        self.directory = directory
        self._s = services
        self._lock = threading.Lock()
        self._sets = _ChangeSets(log_id, initial_sqn)
        self._header = LogHeader(log_id, {})
        self._label: str | None = None
        self._label_uses = 0
        self._persists: set[concurrent.futures.Future[ChangelogHandle]] = set()
        self._closed = False

    def append(self, key_group: int, payload: bytes) -> None:
        """Add one change to the active change set; may block while uploads are over the limit."""
        self._check_open()
        if type(payload) is not bytes:
            payload = _as_bytes(payload, self.log_id)
        if type(key_group) is not int or not 0 <= key_group <= MAX_KEY_GROUP:
            raise ChangelogError(f"log {self.log_id!r}: key group must be an int in "
                                 f"[0, {MAX_KEY_GROUP}], got {key_group!r}")
        self._s.limiter.acquire(0)
        threshold = self._s.settings.preemptive_persist_threshold
        with self._lock:
            sets = self._sets
            sets.active.append((key_group, payload))
            sets.active_bytes += len(payload)
            over = sets.pending_bytes + sets.active_bytes > threshold
            ticket = sets.take_pending(self) if over else None
        if ticket is not None:
            self._s.metrics.inc("preemptive_persists")
            log.debug("log %r: pre-emptive persist of %d bytes", self.log_id, ticket.size)
            self._submit(ticket)

    def next_sqn(self) -> int:
        """Close the active change set if it has changes; the SQN the next append will get."""
        self._check_open()
        with self._lock:
            self._sets.roll_over()
            return self._sets.active_sqn

    @property
    def open_sqn(self) -> int:
        """The SQN the active change set will close under: the next append joins it."""
        with self._lock:
            return self._sets.active_sqn

    @property
    def lowest_sqn(self) -> int:
        """The lowest SQN still held (everything below was truncated)."""
        return self._sets.lowest

    @property
    def last_appended_sqn(self) -> int | None:
        """SQN of the newest change set holding changes; None when nothing was appended yet."""
        with self._lock:
            sets = self._sets
            if sets.active:
                return sets.active_sqn
            return sets.active_sqn - 1 if sets.active_sqn > sets.initial_sqn else None

    def set_header(self, metadata: Mapping[str, Any], *, label: str | None = None) -> None:
        """Metadata for the LogHeader of every file carrying this log from now on.

        `label` names those files when this writer is alone in its directory's drain: the first
        file is `<label>.changelog`, later ones `<label>.<n>.changelog` (n = 1, 2, ...).
        """
        self._check_open()
        try:
            msgpack.packb(dict(metadata), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ChangelogError(f"log {self.log_id!r}: header metadata is not "
                                 f"msgpack-serializable: {exc}") from exc
        if label is not None:
            _check_label(label, self.log_id)
        with self._lock:
            self._header = LogHeader(self.log_id, dict(metadata))
            if label != self._label:
                self._label, self._label_uses = label, 0

    def persist(self, from_sqn: int) -> concurrent.futures.Future[ChangelogHandle]:
        """Make [from_sqn, next_sqn) durable; the future gives its handle or UploadFailedError."""
        self._check_open()
        plan = self._plan(from_sqn)
        if plan.new_ticket is not None:
            self._submit(plan.new_ticket)
        if not plan.tickets:
            done: concurrent.futures.Future[ChangelogHandle] = concurrent.futures.Future()
            done.set_result(self._handle(plan, []))
            return done
        future = self._s.loop.submit(self._complete(plan))
        with self._lock:
            self._persists.add(future)
        future.add_done_callback(self._persist_done)
        return future

    async def apersist(self, from_sqn: int) -> ChangelogHandle:
        """persist() for async callers: awaits instead of blocking while over the limit."""
        self._check_open()
        plan = self._plan(from_sqn)
        if plan.new_ticket is not None:
            await self._asubmit(plan.new_ticket)
        return await self._complete(plan)

    def truncate(self, before_sqn: int) -> list[str]:
        """Forget change sets below `before_sqn`; return files no writer's change set uses now.

        Deleting those files is the caller's decision: a checkpoint may still name them.
        """
        self._check_open()
        with self._lock:
            return self._sets.truncate(before_sqn, self._s.refs)

    def close(self, timeout: float | None = None) -> None:
        """Wait for this writer's uploads in flight (at most `timeout`), then refuse all calls."""
        if self._closed:
            return
        if self._s.loop.in_loop_thread():
            raise ChangelogError(f"log {self.log_id!r}: close() would block the storage's event "
                                 f"loop; call it from another thread")
        with self._lock:
            self._closed = True
            futures: list[concurrent.futures.Future[Any]] = [*self._sets.in_flight(),
                                                             *self._persists]
        concurrent.futures.wait(futures, timeout=timeout)
        with self._lock:
            self._sets.forget_all(self._s.refs)
        self._s.forget(self)

    @property
    def closed(self) -> bool:
        return self._closed or self._s.is_closed()

    # --- the scheduler's side (TicketOwner) ---------------------------------------------------

    def log_header(self) -> LogHeader:
        with self._lock:
            return self._header

    def claim_file_stem(self) -> str | None:
        """The label for one more file of this writer alone, numbered from the second on."""
        with self._lock:
            if self._label is None:
                return None
            uses, self._label_uses = self._label_uses, self._label_uses + 1
            return self._label if uses == 0 else f"{self._label}.{uses}"

    def on_ticket_uploaded(self, ticket: UploadTicket, path: str,
                           segments: Mapping[int, Segment]) -> None:
        with self._lock:
            self._sets.uploaded(ticket, path, segments, self._s.refs)

    def on_ticket_failed(self, ticket: UploadTicket) -> None:
        with self._lock:
            self._sets.failed(ticket)

    # --- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed or self._s.is_closed():
            raise WriterClosedError(f"changelog writer of log {self.log_id!r} is closed")

    def _persist_done(self, future: concurrent.futures.Future[ChangelogHandle]) -> None:
        with self._lock:
            self._persists.discard(future)

    def _plan(self, from_sqn: int) -> _Plan:
        self._s.metrics.inc("persists")
        with self._lock:
            return self._sets.plan(self, from_sqn)

    def _submit(self, ticket: UploadTicket) -> None:
        try:
            self._s.limiter.acquire(ticket.size)
        except BaseException as exc:
            self._abort(ticket, exc)
            raise
        self._enqueue(ticket)

    async def _asubmit(self, ticket: UploadTicket) -> None:
        try:
            await self._s.limiter.aacquire(ticket.size)
        except BaseException as exc:
            self._abort(ticket, exc)
            raise
        self._enqueue(ticket)

    def _enqueue(self, ticket: UploadTicket) -> None:
        try:
            self._s.scheduler.submit(ticket)
        except BaseException as exc:
            self._s.limiter.release(ticket.size)
            self._abort(ticket, exc)
            raise

    def _abort(self, ticket: UploadTicket, exc: BaseException) -> None:
        self.on_ticket_failed(ticket)
        ticket.future.set_exception(exc)

    async def _complete(self, plan: _Plan) -> ChangelogHandle:
        results = await asyncio.gather(*(asyncio.wrap_future(t.future) for t in plan.tickets))
        return self._handle(plan, [s for result in results for s in result.values()])

    def _handle(self, plan: _Plan, uploaded: list[Segment]) -> ChangelogHandle:
        segments = plan.segments + [s for s in uploaded
                                    if plan.from_sqn <= s.from_sqn < plan.to_sqn]
        if len(segments) != plan.to_sqn - plan.from_sqn:
            raise ChangelogError(f"log {self.log_id!r}: {len(segments)} segments for SQNs "
                                 f"[{plan.from_sqn}, {plan.to_sqn}); the writer lost track")
        return ChangelogHandle.of(self.log_id, plan.from_sqn, plan.to_sqn, segments)


def _check_label(label: str, log_id: str) -> None:
    bad = not isinstance(label, str) or not label or label in (".", "..") or any(
        char in label for char in "/\\\x00")
    if bad:
        raise ChangelogError(f"log {log_id!r}: label {label!r} cannot be a file name "
                             f"(no '/', '\\', NUL, '.' or '..')")


def _as_bytes(payload: object, log_id: str) -> bytes:
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise TypeError(f"log {log_id!r}: payload must be bytes, got {type(payload).__name__}")
