"""Task side: what the changelog's uploads did since this process last reported them.

A ChangelogService is shared by every store of a checkpoint root in a Python worker and its
counters only grow. Each task reports the change since the previous report of the same
storage in this process, so uploads that finished between tasks (background snapshots,
hedges that landed late) are counted once, by the next task, and none are lost.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from pyspark_dstl.changelog.changelog_service import ChangelogService

COUNTERS = ("requests", "request_failures", "uploads", "upload_failures", "bytes_uploaded",
            "retries", "hedges_started", "hedges_won")

_last: weakref.WeakKeyDictionary[ChangelogService, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def upload_delta(storage: ChangelogService) -> dict[str, Any]:
    """Counters, time blocked by backpressure and latency bucket counts since the last call
    for `storage` in this process (since it was opened, on the first call)."""
    now = storage.metrics.snapshot()
    with _lock:
        before = _last.get(storage, {})
        _last[storage] = now
    delta: dict[str, Any] = {name: int(now[name]) - int(before.get(name, 0))
                             for name in COUNTERS}
    delta["blocked_seconds"] = float(now["blocked_seconds"]) - float(
        before.get("blocked_seconds", 0.0))
    old_buckets = (before.get("upload_latency") or {}).get("buckets", {})
    delta["latency_buckets"] = {label: int(count) - int(old_buckets.get(label, 0))
                                for label, count in now["upload_latency"]["buckets"].items()}
    return delta
