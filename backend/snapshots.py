"""SnapshotTracker: the snapshots one store instance started, and which one a commit adopts.

At most one runs in the background at a time (the materializer's rule). A finished one is
adopted by the next commit, unless it is older than the retention window (cleanup may have
taken its files) or no longer part of the instance's history; the backstop and explicit
requests snapshot synchronously and are adopted at once.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, wait

from backend.context import RootContext
from backend.engine import Engine
from backend.errors import BackendError
from backend.position import Position
from materializer.errors import MaterializerError
from materializer.handle import MaterializedHandle, SnapshotRequest
from materializer.schedule import Decision

log = logging.getLogger(__name__)


class SnapshotTracker:
    def __init__(self, context: RootContext, store_id: str) -> None:
        self._context = context
        self._store_id = store_id
        self._pending: tuple[SnapshotRequest, Future[MaterializedHandle]] | None = None
        self.started = 0
        self.adopted = 0
        self.dropped = 0

    @property
    def in_flight(self) -> tuple[int, str] | None:
        """(version, unique id) of the snapshot still reported as running, if any."""
        if self._pending is None:
            return None
        return self._pending[0].version, self._pending[0].unique_id

    def finished(self, position: Position, new_version: int) -> MaterializedHandle | None:
        """A finished snapshot the commit of `new_version` may build on, if there is one."""
        if self._pending is None or not self._pending[1].done():
            return None
        handle = self._take()
        if handle is None:
            return None
        self._context.materializer.poll(self._store_id)  # drain the report consumed here
        oldest_safe = new_version - self._context.options.min_batches_to_retain + 1
        if handle.version < oldest_safe or \
                (handle.version, handle.unique_id) not in position.lineage:
            self.dropped += 1  # cleanup may have taken its files, or not our history now
            return None
        self.adopted += 1
        return handle

    def wait(self, timeout: float | None) -> bool:
        """Block until the snapshot in flight (if any) is done; False if time ran out."""
        if self._pending is None:
            return True
        _, not_done = wait([self._pending[1]], timeout=timeout)
        return not not_done

    def drop_failed(self) -> None:
        """Forget a snapshot that failed (maintenance); a finished one waits for a commit."""
        if self._pending is not None and self._pending[1].done() \
                and self._pending[1].exception() is not None:
            self._take()

    def _take(self) -> MaterializedHandle | None:
        """Remove the done snapshot from flight: its handle, or None (logged) if it failed."""
        assert self._pending is not None
        request, future = self._pending
        self._pending = None
        try:
            return future.result()
        except MaterializerError as exc:
            log.warning("store %r: snapshot %d_%s failed: %s", self._store_id,
                        request.version, request.unique_id, exc)
            self.dropped += 1
            return None

    def maybe_start(self, engine: Engine, position: Position, sqn: int,
                    force: bool) -> MaterializedHandle | None:
        """Snapshot at this commit boundary if scheduled; a synchronous one is returned."""
        materializer = self._context.materializer
        decision = materializer.should_snapshot(self._store_id, position.handle.size)
        if force:
            decision = Decision.BACKSTOP
        if decision is Decision.NO:
            return None
        assert position.unique_id is not None
        request = SnapshotRequest(self._store_id, position.version, position.unique_id, sqn,
                                  position.lineage)
        try:
            with engine.rocksdb_view() as db:
                future = materializer.snapshot(db, request)
            self.started += 1
            if decision is not Decision.BACKSTOP:
                self._pending = (request, future)
                return None
            handle = future.result()
        except MaterializerError as exc:
            if force:
                raise BackendError(f"store {self._store_id!r}: the requested snapshot of "
                                   f"version {position.version} failed (the commit itself is "
                                   f"durable): {exc}") from exc
            log.warning("store %r: snapshot of version %d failed: %s", self._store_id,
                        position.version, exc)
            return None
        materializer.poll(self._store_id)
        self.adopted += 1
        return handle
