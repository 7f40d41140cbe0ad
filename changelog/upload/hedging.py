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

from pyspark_dstl.changelog.changelog_errors import TransientStorageError
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.metrics import ChangelogMetrics, quantile

T = TypeVar("T")
log = logging.getLogger(__name__)
WINDOW = 1000


class LatencyTracker:
    """Latencies of recent successful uploads; a quantile of them sets the hedge delay."""

    def __init__(self, settings: ChangelogSettings, window: int = WINDOW) -> None:
        self.quantile = settings.hedge_quantile
        self.min_delay = settings.hedge_min_delay
        self.max_delay = settings.hedge_max_delay
        self.min_samples = settings.hedge_min_samples
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
    """Races a request against delayed twins; the first success wins, the others are cancelled.

    A twin starts each time the newest request has run for one hedge delay without any
    success, up to `max_hedges` twins, each paid from the budget. One twin cuts most of a heavy
    tail; the rare case where the twin lands in the tail too needs the second.
    """

    def __init__(self, tracker: LatencyTracker, budget: HedgeBudget,
                 metrics: ChangelogMetrics, max_hedges: int = 1) -> None:
        self.tracker = tracker
        self.budget = budget
        self.max_hedges = max_hedges
        self._metrics = metrics

    async def race(self, request: Callable[[], Awaitable[T]], *, path: str) -> T:
        """Run `request()`, and again after each hedge delay while nothing has succeeded.

        The tracker learns the latency of the request that won, measured from its own start.
        The race's combined time would feed the hedge delay back into itself, and a cancelled
        loser's time so far keeps an early high delay stuck; leaving losers out biases the
        quantile low instead, and the hedge budget bounds what that costs. A failure before
        any twin started is raised at once (the retry policy decides); once twins run, the
        race waits for a success and raises the most telling error only when all failed.
        """
        started: dict[asyncio.Future[T], float] = {}
        tasks: list[asyncio.Future[T]] = []

        def launch() -> None:
            task: asyncio.Future[T] = asyncio.ensure_future(request())
            started[task] = time.monotonic()
            tasks.append(task)

        launch()
        try:
            delay = self.tracker.hedge_delay()
            may_hedge = self.max_hedges > 0
            while True:
                winner = next((t for t in tasks if t.done() and t.exception() is None), None)
                if winner is not None:
                    self.tracker.record(time.monotonic() - started[winner])
                    if winner is not tasks[0]:
                        self._metrics.inc("hedges_won")
                    return winner.result()
                pending = [t for t in tasks if not t.done()]
                if not pending:
                    raise _telling_error(tasks)
                timeout = None
                if may_hedge:
                    timeout = max(0.0, started[tasks[-1]] + delay - time.monotonic())
                done, _ = await asyncio.wait(pending, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if done:
                    if len(tasks) == 1 and tasks[0].exception() is not None:
                        raise _telling_error(tasks)  # failed before any twin: retry policy
                    continue
                if not self.budget.try_spend():
                    may_hedge = False
                    continue
                self._metrics.inc("hedges_started")
                log.debug("hedging upload of %r (twin %d) after %.3fs", path, len(tasks), delay)
                launch()
                may_hedge = len(tasks) <= self.max_hedges
        finally:
            for task in started:
                if not task.done():
                    task.cancel()
                    task.add_done_callback(_consume)


def _telling_error(tasks: list[asyncio.Future[T]]) -> BaseException:
    """When every request failed: a non-transient error (a real conflict, a 403) says more
    than a timeout of a twin."""
    errors = [task.exception() for task in tasks]
    lasting = [e for e in errors if e is not None and not isinstance(e, TransientStorageError)]
    error = lasting[0] if lasting else errors[0]
    assert error is not None
    return error


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
