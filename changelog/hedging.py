"""Hedged requests: when a create-only upload is slower than most recent ones, send a twin.

Only immutable, create-only writes are hedged: both requests carry the same key and bytes, so
whichever lands first is the object and the other can only fail with "exists" or write nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from changelog.config import ChangelogOptions
from changelog.errors import TransientStorageError
from changelog.metrics import ChangelogMetrics, quantile

T = TypeVar("T")
log = logging.getLogger(__name__)
WINDOW = 1000


class LatencyTracker:
    """Latencies of recent successful uploads; a quantile of them sets the hedge delay."""

    def __init__(self, options: ChangelogOptions, window: int = WINDOW) -> None:
        self.quantile = options.hedge_quantile
        self.min_delay = options.hedge_min_delay
        self.max_delay = options.hedge_max_delay
        self.min_samples = options.hedge_min_samples
        self._samples: deque[float] = deque(maxlen=window)

    def record(self, seconds: float) -> None:
        self._samples.append(seconds)

    @property
    def samples(self) -> int:
        return len(self._samples)

    def hedge_delay(self) -> float:
        """Seconds to wait before hedging; the cap until enough samples are known."""
        if len(self._samples) < self.min_samples:
            return self.max_delay
        observed = quantile(sorted(self._samples), self.quantile)
        return min(self.max_delay, max(self.min_delay, observed))


class HedgeBudget:
    """Caps hedges at `ratio` of uploads, counted over the last `window` uploads and hedges.

    A sliding window rather than totals: a long healthy past must not pay for a burst of
    hedges when the store turns slow, which is exactly when extra load hurts most.
    """

    def __init__(self, ratio: float, window: int = WINDOW) -> None:
        self.ratio = ratio
        self._events: deque[bool] = deque(maxlen=window)  # True = hedge, False = upload
        self._hedges = 0

    def _push(self, is_hedge: bool) -> None:
        if len(self._events) == self._events.maxlen and self._events[0]:
            self._hedges -= 1
        self._events.append(is_hedge)
        self._hedges += is_hedge

    def upload_started(self) -> None:
        self._push(False)

    def try_spend(self) -> bool:
        uploads = len(self._events) - self._hedges
        if self._hedges + 1 > self.ratio * uploads:
            return False
        self._push(True)
        return True


class Hedger:
    """Races a request against one delayed twin; the first success wins, the loser is cancelled."""

    def __init__(self, tracker: LatencyTracker, budget: HedgeBudget,
                 metrics: ChangelogMetrics) -> None:
        self.tracker = tracker
        self.budget = budget
        self._metrics = metrics

    async def race(self, request: Callable[[], Awaitable[T]], *, path: str) -> T:
        """Run `request()`; if it is still running after the hedge delay, run it once more.

        The tracker learns the latency of each request that completed, measured from its own
        start. The pair's combined time would feed the hedge delay back into itself, and a
        cancelled loser's time so far keeps an early high delay stuck; leaving losers out biases
        the quantile low instead, and the hedge budget bounds what that costs.
        """
        started: dict[asyncio.Future[T], float] = {}
        primary: asyncio.Future[T] = asyncio.ensure_future(request())
        started[primary] = time.monotonic()
        try:
            delay = self.tracker.hedge_delay()
            await asyncio.wait([primary], timeout=delay)
            if primary.done() or not self.budget.try_spend():
                result = await primary
                self.tracker.record(time.monotonic() - started[primary])
                return result
            self._metrics.inc("hedges_started")
            log.debug("hedging upload of %r after %.3fs", path, delay)
            hedge: asyncio.Future[T] = asyncio.ensure_future(request())
            started[hedge] = time.monotonic()
            winner = await _first_success([primary, hedge])
            self.tracker.record(time.monotonic() - started[winner])
            if winner is hedge:
                self._metrics.inc("hedges_won")
            return winner.result()
        finally:
            for task in started:
                if not task.done():
                    task.cancel()
                    task.add_done_callback(_consume)


async def _first_success(tasks: list[asyncio.Future[T]]) -> asyncio.Future[T]:
    """The first task that succeeds; when all fail, raise the most telling error."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task.exception() is None:
                return task
    errors = [task.exception() for task in tasks]
    # A non-transient error (a real conflict, a 403) says more than a timeout of the twin.
    lasting = [e for e in errors if e is not None and not isinstance(e, TransientStorageError)]
    error = lasting[0] if lasting else errors[0]
    assert error is not None
    raise error


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
