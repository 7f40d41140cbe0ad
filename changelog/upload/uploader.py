"""Create-only uploads: retries around an optionally hedged attempt, never an overwrite."""

from __future__ import annotations

import asyncio
import logging
import time

from pyspark_dstl.changelog.changelog_errors import ObjectExistsError, UploadFailedError
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.metrics import ChangelogMetrics
from pyspark_dstl.changelog.storage.base import Storage, check_key, md5_hex
from pyspark_dstl.changelog.upload.hedging import HedgeBudget, Hedger, LatencyTracker
from pyspark_dstl.changelog.upload.retry import RetryPolicy

log = logging.getLogger(__name__)


class _Sent:
    """How many create requests for one upload have been started (across attempts and hedges)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class Uploader:
    """Uploads immutable objects; one attempt is a request plus, maybe, its hedge.

    "Exists" is ambiguous once we have sent more than one request for a key: a timed-out,
    reset or hedged request of ours may have landed. Then the object is ours exactly when it
    holds our bytes; anything else is a conflict and fails the upload without touching it.
    """

    def __init__(self, storage: Storage, settings: ChangelogSettings, metrics: ChangelogMetrics,
                 retry: RetryPolicy | None = None, tracker: LatencyTracker | None = None,
                 budget: HedgeBudget | None = None) -> None:
        self.storage = storage
        self.settings = settings
        self.retry = retry or RetryPolicy(settings, metrics)
        self.tracker = tracker or LatencyTracker(settings)
        self.budget = budget or HedgeBudget(settings.hedge_budget)
        self._metrics = metrics
        self._hedger = Hedger(self.tracker, self.budget, metrics, settings.hedge_max_hedges)

    async def upload(self, path: str, data: bytes, *, hedge: bool = True) -> str:
        """Create `path` with `data`; return its MD5 hex ETag; raise UploadFailedError."""
        check_key(path)
        hedged = hedge and self.settings.hedging_enabled
        if hedged:
            self.budget.upload_started()
        sent = _Sent()
        attempts = 0
        started = time.monotonic()

        async def attempt(number: int) -> str:
            nonlocal attempts
            attempts = number
            if hedged:
                return await self._hedger.race(lambda: self._request(path, data, sent),
                                               path=path)
            return await self._request(path, data, sent)

        try:
            etag = await self.retry.call(attempt, path=path, what="upload")
        except Exception as exc:
            self._metrics.upload_failed(attempts)
            log.debug("upload of %r gave up after %d attempt(s): %s", path, attempts, exc)
            raise UploadFailedError(f"upload of {path!r} failed after {attempts} attempt(s): "
                                    f"{exc}", path) from exc
        self._metrics.upload_succeeded(time.monotonic() - started, attempts, len(data))
        return etag

    async def _request(self, path: str, data: bytes, sent: _Sent) -> str:
        sent.count += 1
        self._metrics.inc("requests")
        try:
            return await self.storage.put_if_absent(path, data)
        except ObjectExistsError as exc:
            if sent.count > 1 and await self.storage.holds(path, data):
                log.debug("%r already holds our bytes: an earlier request of ours landed", path)
                return md5_hex(data)
            self._metrics.inc("request_failures")
            if sent.count > 1:
                raise ObjectExistsError(f"{path!r} exists with other content than this upload; "
                                        f"it was not overwritten", path) from exc
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            self._metrics.inc("request_failures")
            raise
