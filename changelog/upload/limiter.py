"""The in-flight limit: bytes queued or uploading, bounded across all writers of one storage.

Writers acquire room for their change sets before handing them to the scheduler, which
releases it once their upload ended. Past the bound persists wait, and so do appends, which
ask for no room but must not run ahead of the callers already waiting (backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable

from pyspark_dstl.changelog.changelog_errors import ChangelogError, WriterClosedError
from pyspark_dstl.changelog.metrics import ChangelogMetrics


class _Waiter:
    """One caller waiting for room: a thread (event) or a coroutine (future on its loop)."""

    __slots__ = ("error", "event", "future", "granted", "loop", "size")

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.size = size
        self.granted = False
        self.error: BaseException | None = None
        self.loop = loop
        self.event = threading.Event() if loop is None else None
        self.future: asyncio.Future[None] | None = loop.create_future() if loop else None

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
            return
        assert self.loop is not None and self.future is not None
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class InFlightLimiter:
    """Bounds queued + uploading bytes; callers past the bound wait, first come first served.

    A request larger than the whole bound is admitted when nothing else is in flight, so a
    huge change set slows everyone down but never deadlocks.
    """

    def __init__(self, limit: int, metrics: ChangelogMetrics,
                 must_not_block: Callable[[], bool] = lambda: False) -> None:
        self.limit = limit
        self._metrics = metrics
        self._must_not_block = must_not_block
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiters: deque[_Waiter] = deque()
        self._closed = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _admits(self, size: int) -> bool:
        return self._in_flight == 0 or self._in_flight + size <= self.limit

    def _take_locked(self, size: int) -> None:
        self._in_flight += size
        self._metrics.set_gauge("in_flight_bytes", self._in_flight)

    def _grant_locked(self) -> None:
        while self._waiters and self._admits(self._waiters[0].size):
            waiter = self._waiters.popleft()
            self._take_locked(waiter.size)
            waiter.granted = True
            waiter.wake()

    def _enter(self, size: int, loop: asyncio.AbstractEventLoop | None) -> _Waiter | None:
        """Take `size` bytes now (None) or queue up and return the waiter."""
        with self._lock:
            if self._closed:
                raise WriterClosedError("the changelog storage is closed")
            if not self._waiters and self._admits(size):
                self._take_locked(size)
                return None
            waiter = _Waiter(size, loop)
            self._waiters.append(waiter)
            return waiter

    def acquire(self, size: int) -> None:
        """Block the calling thread until `size` more bytes may be in flight (0: until not over)."""
        waiter = self._enter(size, None)
        if waiter is None:
            return
        if self._must_not_block():
            self._abandon(waiter)
            raise ChangelogError("the changelog is over its in-flight limit and this call would "
                                 "block the storage's event loop; use the async variant")
        assert waiter.event is not None
        self._metrics.add_gauge("blocked_callers", 1)
        began = time.monotonic()
        try:
            waiter.event.wait()
        finally:
            self._metrics.add_gauge("blocked_callers", -1)
            self._metrics.blocked(time.monotonic() - began)
        if waiter.error is not None:
            raise waiter.error

    async def aacquire(self, size: int) -> None:
        """Like acquire, awaiting instead of blocking."""
        waiter = self._enter(size, asyncio.get_running_loop())
        if waiter is None:
            return
        assert waiter.future is not None
        self._metrics.add_gauge("blocked_callers", 1)
        began = time.monotonic()
        try:
            await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        finally:
            self._metrics.add_gauge("blocked_callers", -1)
            self._metrics.blocked(time.monotonic() - began)
        if waiter.error is not None:
            raise waiter.error

    def _abandon(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.granted:
                self._in_flight -= waiter.size
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            self._grant_locked()
            self._metrics.set_gauge("in_flight_bytes", self._in_flight)

    def release(self, size: int) -> None:
        with self._lock:
            self._in_flight -= size
            self._metrics.set_gauge("in_flight_bytes", self._in_flight)
            self._grant_locked()

    def close(self) -> None:
        """Wake every waiter with WriterClosedError; later acquires fail at once."""
        with self._lock:
            self._closed = True
            waiters, self._waiters = list(self._waiters), deque()
            for waiter in waiters:
                waiter.error = WriterClosedError("the changelog storage was closed while this "
                                                 "call waited for upload capacity")
                waiter.wake()
