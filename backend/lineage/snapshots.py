"""SnapshotTracker: the snapshot a store instance waits for, and which one a commit adopts.

Two kinds: one this instance started (a future; at most one runs at a time, the materializer's
rule), or one that another process started and the loaded StoreCommit reports as pending
(the store moved here meanwhile); while that one is awaited, each commit looks once (one HEAD)
whether its manifest has landed. A commit adopts a finished snapshot unless it is older than
not part of the instance's history or a file its manifest names is missing: a cleanup may
have run while it was uploading (this check precedes every adoption, the synchronous
backstop's included). Its age does not matter: while the newest checkpoint reports a snapshot
in flight, cleanup keeps everything from its version up and, once its manifest has landed,
every file the manifest names, so a snapshot that outlived the retention window is still
adopted (with a small minBatchesToRetain most background snapshots do). Only one started
elsewhere whose manifest has not landed when it leaves the window is given up: its process
may be gone, and asking for it at every commit would keep the cleanup floor down for good.
The backstop and explicit requests snapshot synchronously and are adopted at once. A
periodic snapshot's RocksDB checkpoint runs on the materializer's checkpoint thread: the
instance calls await_checkpoint() before it next writes to, flushes or closes the engine, so
the checkpoint holds exactly the committed version.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, wait
from typing import Protocol

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.naming import snapshot_path
from pyspark_dstl.backend.lineage.position import Position
from pyspark_dstl.changelog.changelog_errors import ChangelogError, ObjectNotFoundError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle, SnapshotRequest
from pyspark_dstl.materializer.materializer_errors import MaterializerError
from pyspark_dstl.materializer.upload.schedule import SnapshotDecision

log = logging.getLogger(__name__)
SnapshotId = tuple[int, str]


class EngineCatchUp(Protocol):
    """A commit's engine write that may still be running (the store room's EngineCatchUp)."""

    @property
    def pending(self) -> Future[None] | None: ...

    def wait(self) -> None: ...


class SnapshotTracker:
    def __init__(self, context: LocationContext, store_id: str,
                 awaited: SnapshotId | None = None) -> None:
        self._context = context
        self._store_id = store_id
        self._pending: tuple[SnapshotRequest, Future[MaterializedHandle]] | None = None
        self._awaited = awaited  # started elsewhere, reported pending by the loaded info
        self._checkpointing: Future[None] | None = None  # engine must not change meanwhile
        self.write_wait_seconds = 0.0  # spent in await_checkpoint()
        self.started = 0
        self.adopted = 0
        self.dropped = 0
        self.missing_files = 0  # of the dropped: a file named by the manifest was gone

    @property
    def in_flight(self) -> SnapshotId | None:
        """(version, unique id) of the snapshot still reported as running, if any."""
        if self._pending is not None:
            return self._pending[0].version, self._pending[0].unique_id
        return self._awaited

    def commits_since_snapshot(self, position: Position) -> int:
        """Commits in the lineage since the last snapshot, a running one counting as taken."""
        running = self.in_flight
        if running is not None and running in position.lineage:
            return sum(1 for version, _ in position.lineage if version > running[0])
        return len(position.lineage)

    def finished(self, position: Position, new_version: int) -> MaterializedHandle | None:
        """A finished snapshot the commit of `new_version` may build on, if there is one."""
        if self._pending is not None:
            if not self._pending[1].done():
                return None
            handle = self._take()
            if handle is None:
                return None
            self._context.materializer.poll(self._store_id)  # drain the report consumed here
            target, path = (handle.version, handle.unique_id), handle.manifest_path
        else:
            landed = self._landed(new_version)
            if landed is None:
                return None
            target, path, handle = landed, snapshot_path(self._store_id, *landed), None
        if target not in position.lineage:
            self.dropped += 1  # not our history now (the batch was run again elsewhere)
            return None
        return self._verified(target, path, handle)

    def _landed(self, new_version: int) -> SnapshotId | None:
        """The awaited snapshot once its manifest exists (one HEAD per call), else None; given
        up when it has not landed by the time it leaves the retention window."""
        if self._awaited is None:
            return None
        target = self._awaited
        path = snapshot_path(self._store_id, *target)
        try:
            if _exists(self._context.storage, path):
                self._awaited = None
                return target
        except ChangelogError as exc:
            log.warning("store %r: cannot look for snapshot manifest %r, trying again at the "
                        "next commit: %s", self._store_id, path, exc)
        if target[0] < new_version - self._context.settings.min_batches_to_retain + 1:
            self._awaited = None  # its process may be gone: stop asking
            self.dropped += 1
        return None

    def _verified(self, target: SnapshotId, path: str,
                  handle: MaterializedHandle | None) -> MaterializedHandle | None:
        """The snapshot's handle (`handle`, or one made from the manifest) if its manifest
        is sound and every file it names exists; None (logged, counted) otherwise."""
        try:
            manifest, missing = self._context.materializer.check_files(path)
        except MaterializerError as exc:
            log.warning("store %r: snapshot %r cannot be checked, not adopted: %s",
                        self._store_id, path, exc)
            self.dropped += 1
            return None
        if (manifest.store_id, manifest.version, manifest.unique_id) != (self._store_id,
                                                                         *target):
            log.warning("store %r: manifest %r describes store %r version %d id %r, not "
                        "adopted", self._store_id, path, manifest.store_id, manifest.version,
                        manifest.unique_id)
            self.dropped += 1
            return None
        if missing:
            log.warning("store %r: snapshot %r names %d missing file(s) (e.g. %r; a cleanup "
                        "ran while it was uploading), not adopted: the changelog stays the "
                        "source", self._store_id, path, len(missing), missing[0])
            self.dropped += 1
            self.missing_files += 1
            return None
        self.adopted += 1
        return handle or MaterializedHandle(self._store_id, manifest.version,
                                            manifest.unique_id, manifest.sqn, path,
                                            manifest.total_bytes, 0, len(manifest.files))

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
                    force: bool, catch_up: EngineCatchUp | None = None
                    ) -> MaterializedHandle | None:
        """Snapshot at this commit boundary if scheduled; a synchronous one is returned.
        `catch_up` holds the commit's engine write if it runs after the commit: a background
        snapshot's checkpoint waits for it, a synchronous one has it applied first."""
        decision = self._context.materializer.should_snapshot(
            self._store_id, position.handle.size,
            commits_since_snapshot=self.commits_since_snapshot(position))
        if force:
            decision = SnapshotDecision.BACKSTOP
        if decision is SnapshotDecision.NO:
            return None
        assert position.unique_id is not None
        request = SnapshotRequest(self._store_id, position.version, position.unique_id, sqn,
                                  position.lineage)
        try:
            if decision is not SnapshotDecision.BACKSTOP:
                self._start_in_background(engine, request, _ready_for(engine, catch_up))
                return None
            handle = self._snapshot_now(engine, request, catch_up)
        except MaterializerError as exc:
            if force:
                raise BackendError(f"store {self._store_id!r}: the requested snapshot of "
                                   f"version {position.version} failed (the commit itself is "
                                   f"durable): {exc}") from exc
            log.warning("store %r: snapshot of version %d failed: %s", self._store_id,
                        position.version, exc)
            return None
        self._context.materializer.poll(self._store_id)
        verified = self._verified((handle.version, handle.unique_id), handle.manifest_path,
                                  handle)
        if verified is None and force:
            raise BackendError(f"store {self._store_id!r}: the requested snapshot of version "
                               f"{position.version} is incomplete in storage (the commit "
                               f"itself is durable); see the warning logged")
        return verified

    def _snapshot_now(self, engine: Engine, request: SnapshotRequest,
                      catch_up: EngineCatchUp | None) -> MaterializedHandle:
        """A backstop snapshot, on this thread, after the commit's engine write."""
        if catch_up is not None:
            catch_up.wait()
        with engine.rocksdb_view() as db:
            future = self._context.materializer.snapshot(db, request)
        self.started += 1
        return future.result()

    def _start_in_background(self, engine: Engine, request: SnapshotRequest,
                             ready: Future[None] | None) -> None:
        """A periodic snapshot: even its checkpoint (memtable flush, hard links) runs off the
        commit, after the commit's engine write (`ready`) if that runs in the background,
        while the next transaction's writes wait in its cache; whatever writes to or closes
        the engine first calls await_checkpoint()."""
        view = engine.rocksdb_view()
        db = view.__enter__()
        try:
            taken, future = self._context.materializer.snapshot_in_background(db, request,
                                                                              ready)
        except BaseException:
            view.__exit__(None, None, None)
            raise
        taken.add_done_callback(lambda _: view.__exit__(None, None, None))
        self._checkpointing = taken
        self.started += 1
        self._pending, self._awaited = (request, future), None

    def await_checkpoint(self) -> None:
        """Block until a checkpoint started in the background no longer reads the engine;
        call before any write to the engine, its flush or its close."""
        taken = self._checkpointing
        if taken is None:
            return
        if not taken.done():
            began = time.monotonic()
            wait([taken])
            self.write_wait_seconds += time.monotonic() - began
        self._checkpointing = None


def _exists(storage: ChangelogService, path: str) -> bool:
    """One HEAD (with the storage's retry policy for transient failures)."""
    async def head() -> bool:
        try:
            await storage.retry.call(lambda _: storage.storage.head(path), path=path,
                                     what="head")
        except ObjectNotFoundError:
            return False
        return True

    return storage.loop.run(head())


def _ready_for(engine: Engine, catch_up: EngineCatchUp | None) -> Future[None] | None:
    """What a background snapshot's checkpoint waits for: the commit's engine write, when the
    engine's view is live; a view that is a copy made now needs the write to land first."""
    if catch_up is None:
        return None
    if engine.LIVE_VIEW:
        return catch_up.pending
    catch_up.wait()
    return None
