"""Counters, gauges and fixed-bucket histograms of the log's uploads, read as one snapshot dict.

Updated from the event loop thread and from writer threads, so every update takes one lock;
the updates are a handful per upload, never per appended change.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from typing import Any

# Upper bounds in seconds (a value v lands in the first bucket with v <= bound; the last bucket
# is unbounded). Fixed so that snapshots of different processes can be added up.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
COUNT_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 1024)
LATENCY_WINDOW = 10_000


class Histogram:
    """Counts per fixed bucket plus sum and count; the caller holds the lock."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def to_dict(self) -> dict[str, Any]:
        labels = [f"{bound:g}" for bound in self.bounds] + ["+Inf"]
        return {
            "buckets": dict(zip(labels, self.counts, strict=True)),
            "count": self.count,
            "sum": self.total,
            "mean": self.total / self.count if self.count else 0.0,
        }


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of already sorted values; 0.0 when there are none."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


_COUNTERS = (
    "requests",            # HTTP-level create requests, including retries and hedges
    "request_failures",    # requests that ended in an error (cancelled hedge losers excluded)
    "uploads",             # uploads that succeeded (one per file, however many requests)
    "upload_failures",     # uploads that gave up (the persist futures failed)
    "bytes_uploaded",      # bytes of successful uploads, each counted once
    "copies",              # objects copied on the storage side (acopy), each counted once
    "retries",             # attempts after the first
    "hedges_started",
    "hedges_won",
    "persists",            # persist() / apersist() calls
    "preemptive_persists",
    "drains",              # scheduler drains that took at least one change set
    "files",               # changelog files written by the scheduler
)


class ChangelogMetrics:
    """One per ChangelogService; `snapshot()` is what callers and dashboards read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._gauges: dict[str, float] = {
            "queue_length": 0, "queued_bytes": 0, "in_flight_bytes": 0, "blocked_callers": 0,
        }
        self._blocked_seconds = 0.0
        self._latency = Histogram(LATENCY_BUCKETS)
        self._recent_latency: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._attempts = Histogram(COUNT_BUCKETS)
        self._logs_per_request = Histogram(COUNT_BUCKETS)
        self._change_sets_per_request = Histogram(COUNT_BUCKETS)

    def inc(self, name: str, amount: int = 1) -> None:
        with self._lock:
            if name not in self._counters:
                raise KeyError(f"unknown changelog metric {name!r}")
            self._counters[name] += amount

    def set_gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def add_gauge(self, name: str, delta: float) -> None:
        with self._lock:
            self._gauges[name] = self._gauges.get(name, 0) + delta

    def upload_succeeded(self, latency: float, attempts: int, size: int) -> None:
        with self._lock:
            self._counters["uploads"] += 1
            self._counters["bytes_uploaded"] += size
            self._latency.observe(latency)
            self._recent_latency.append(latency)
            self._attempts.observe(attempts)

    def upload_failed(self, attempts: int) -> None:
        with self._lock:
            self._counters["upload_failures"] += 1
            self._attempts.observe(attempts)

    def file_written(self, logs: int, change_sets: int) -> None:
        with self._lock:
            self._counters["files"] += 1
            self._logs_per_request.observe(logs)
            self._change_sets_per_request.observe(change_sets)

    def blocked(self, seconds: float) -> None:
        with self._lock:
            self._blocked_seconds += seconds

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            recent = sorted(self._recent_latency)
            return {
                **self._counters,
                **self._gauges,
                "blocked_seconds": self._blocked_seconds,
                "upload_latency": self._latency.to_dict(),
                "upload_latency_p50": quantile(recent, 0.50),
                "upload_latency_p99": quantile(recent, 0.99),
                "attempts_per_upload": self._attempts.to_dict(),
                "logs_per_request": self._logs_per_request.to_dict(),
                "change_sets_per_request": self._change_sets_per_request.to_dict(),
            }
