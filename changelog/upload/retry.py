"""The one retry layer of every storage call: tenacity, full-jitter backoff, per-attempt timeouts.

The S3 client is configured with its own retries off, so the attempt count here is the number
of requests that can reach the server for one logical call (hedges aside).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from pyspark_dstl.changelog.changelog_errors import TransientStorageError
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.metrics import ChangelogMetrics

T = TypeVar("T")
log = logging.getLogger(__name__)


class RetryPolicy:
    """Retries only TransientStorageError (throttling, 5xx, 409, connection errors, timeouts).

    ObjectExistsError, ObjectNotFoundError and PermanentStorageError go straight to the caller:
    repeating them cannot change the answer.
    """

    def __init__(self, settings: ChangelogSettings,
                 metrics: ChangelogMetrics | None = None) -> None:
        self.max_attempts = settings.max_attempts
        self.attempt_timeout = settings.attempt_timeout
        self.backoff_initial = settings.backoff_initial
        self.backoff_max = settings.backoff_max
        self._metrics = metrics

    async def call(self, attempt: Callable[[int], Awaitable[T]], *, path: str,
                   what: str = "request") -> T:
        """Run `attempt(n)` for n = 1, 2, ... until it returns; re-raise the last error.

        Each attempt runs under `attempt_timeout`; running out of time counts as transient.
        """
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_random_exponential(multiplier=self.backoff_initial, max=self.backoff_max),
            retry=retry_if_exception_type(TransientStorageError),
            before_sleep=lambda state: self._before_sleep(state, path, what),
            reraise=True,
        )
        async for try_ in retrying:
            with try_:
                return await self._timed(attempt, try_.retry_state.attempt_number, path, what)
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    async def _timed(self, attempt: Callable[[int], Awaitable[T]], number: int, path: str,
                     what: str) -> T:
        try:
            async with asyncio.timeout(self.attempt_timeout):
                return await attempt(number)
        except TimeoutError as exc:
            raise TransientStorageError(
                f"{what} of {path!r}: attempt {number} timed out after "
                f"{self.attempt_timeout:g}s", path) from exc

    def _before_sleep(self, state: RetryCallState, path: str, what: str) -> None:
        if self._metrics is not None:
            self._metrics.inc("retries")
        error = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.debug("%s of %r: attempt %d failed (%s); retrying in %.3fs",
                  what, path, state.attempt_number, error, wait)
