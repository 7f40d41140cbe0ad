"""When to snapshot one store: every N commits, every interval, or at once past a backstop."""

from __future__ import annotations

import enum
import zlib
from concurrent.futures import Future
from dataclasses import dataclass, field

from pyspark_dstl.materializer.materialized_handle import MaterializedHandle
from pyspark_dstl.materializer.materializer_errors import MaterializationFailedError
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings


class SnapshotDecision(enum.Enum):
    NO = "no"
    PERIODIC = "periodic"
    BACKSTOP = "backstop"


def first_delay(store_id: str, interval: float) -> float:
    """A stable fraction of one interval, so stores registered together do not snapshot together.

    CRC-32 rather than hash(): Python's str hash changes per process.
    """
    return interval * (zlib.crc32(store_id.encode()) % 10_000) / 10_000


@dataclass
class StoreSchedule:
    """Per-store state; the Materializer holds its lock around every call."""

    store_id: str
    remote_dir: str
    settings: MaterializerSettings
    next_due: float | None
    commits: int = 0
    failures: int = 0
    last_error: BaseException | None = None
    in_flight: set[Future[MaterializedHandle]] = field(default_factory=set)
    completed: MaterializedHandle | None = None

    @classmethod
    def create(cls, store_id: str, remote_dir: str, settings: MaterializerSettings,
               now: float) -> StoreSchedule:
        due = None if settings.interval is None else now + first_delay(store_id,
                                                                       settings.interval)
        return cls(store_id, remote_dir, settings, due)

    def check_failures(self) -> None:
        """Raise once more snapshots failed in a row than `max_consecutive_failures` allows."""
        if self.failures > self.settings.max_consecutive_failures:
            raise MaterializationFailedError(self.store_id, self.failures, self.last_error)

    def decide(self, unmaterialized_bytes: int, now: float,
               commits_since_snapshot: int | None = None) -> SnapshotDecision:
        """Count one commit and say whether to snapshot now (ignores what is in flight).

        `commits_since_snapshot`, when the owner knows it (from the store's lineage), replaces
        this process's own count: a store that moves between processes still gets its
        snapshot every N commits, although no single process made N of them.
        """
        self.commits += 1
        if unmaterialized_bytes >= self.settings.backstop_bytes:
            return SnapshotDecision.BACKSTOP
        if self.in_flight:
            return SnapshotDecision.NO
        n = self.settings.every_n_commits
        commits = self.commits if commits_since_snapshot is None else commits_since_snapshot
        if n is not None and commits >= n:
            return SnapshotDecision.PERIODIC
        if self.next_due is not None and now >= self.next_due:
            return SnapshotDecision.PERIODIC
        return SnapshotDecision.NO

    def started(self, future: Future[MaterializedHandle], now: float) -> None:
        self.in_flight.add(future)
        self.commits = 0
        if self.settings.interval is not None:
            self.next_due = now + self.settings.interval

    def succeeded(self, future: Future[MaterializedHandle], handle: MaterializedHandle) -> None:
        self.in_flight.discard(future)
        self.failures = 0
        self.last_error = None
        if self.completed is None or _newer(handle, self.completed):
            self.completed = handle

    def failed(self, future: Future[MaterializedHandle] | None, error: BaseException) -> None:
        if future is not None:
            self.in_flight.discard(future)
        self.failures += 1
        self.last_error = error

    def abandoned(self, future: Future[MaterializedHandle]) -> None:
        """The caller cancelled the snapshot before it ran: neither success nor failure."""
        self.in_flight.discard(future)

    def summary(self) -> dict[str, int | bool]:
        return {
            "in_flight": len(self.in_flight),
            "commits_since_snapshot": self.commits,
            "consecutive_failures": self.failures,
            "pending_report": self.completed is not None,
        }

    def take_completed(self) -> MaterializedHandle | None:
        handle, self.completed = self.completed, None
        return handle


def _newer(a: MaterializedHandle, b: MaterializedHandle) -> bool:
    return (a.version, a.sqn) >= (b.version, b.sqn)
