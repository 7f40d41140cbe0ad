"""Counters and gauges of the materializer, safe to update from any thread."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable


class Metrics:
    """Monotonic counters plus last-value gauges; `snapshot()` copies both."""

    def __init__(self, counters: Iterable[str] = ()) -> None:
        self._counters: defaultdict[str, float] = defaultdict(float)
        for name in counters:  # present (as 0) from the start, so dashboards see every name
            self._counters[name] = 0
        self._gauges: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def set(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            merged: dict[str, float] = dict(self._counters)
            merged.update(self._gauges)
            return merged
