"""Materializer: schedules, takes, uploads and restores RocksDB snapshots for many stores."""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from rocksdict import Rdict

from pyspark_dstl.materializer.checksum import ChecksumCache
from pyspark_dstl.materializer.file_cache import FileCache
from pyspark_dstl.materializer.link_copy import LinkCopy, owned_link_copy_root, take_link_copy
from pyspark_dstl.materializer.manifest import SnapshotFile, SnapshotManifest
from pyspark_dstl.materializer.manifest_listing import amissing_files, aread_manifest
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle, SnapshotRequest
from pyspark_dstl.materializer.materializer_errors import (
    ManifestError,
    MaterializerClosedError,
    MaterializerError,
    SnapshotRequestError,
    StoreNotRegisteredError,
)
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.materializer.metrics import Metrics
from pyspark_dstl.materializer.names import check_remote_dir, local_dir_name
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.materializer.restore import RestoredSnapshot, SnapshotRestorer
from pyspark_dstl.materializer.upload.dedup import UploadedFiles
from pyspark_dstl.materializer.upload.job import SnapshotJob
from pyspark_dstl.materializer.upload.schedule import SnapshotDecision, StoreSchedule
from pyspark_dstl.materializer.upload.uploader import SnapshotUploader

COUNTERS = (
    "snapshots_started", "snapshots_succeeded", "snapshots_failed", "checkpoint_seconds_total",
    "files_uploaded", "bytes_uploaded", "files_reused", "bytes_reused", "reused_missing",
    "files_referenced", "bytes_referenced",
    "file_upload_failures", "decisions_periodic", "decisions_backstop", "backstop_wait_seconds",
    "restores", "restore_seconds_total", "restore_files_downloaded", "restore_bytes_downloaded",
    "restore_files_from_cache", "cache_corrupt_entries", "checks_missing_files",
)


class Materializer:
    """One per process (or backend); thread-safe.

    Call `should_snapshot` once per commit (it counts commits), and when it says so call
    `snapshot` at that commit boundary. Completed snapshots are reported by `poll`.
    """

    def __init__(self, storage: RemoteFiles, settings: MaterializerSettings,
                 local_dir: str, checksums: ChecksumCache | None = None) -> None:
        """`checksums`: a cache shared with another materializer of the process, so files it
        restored and verified (hard-linked into this one's checkpoints, the same inodes) are
        not read again to be checksummed (a rescale's new stores made of old ones)."""
        self._storage = storage
        self._settings = settings
        self._local_dir = os.path.abspath(local_dir)
        self._link_copy_root = owned_link_copy_root(os.path.join(self._local_dir,
                                                                 "checkpoints"))
        self._cache_root = os.path.abspath(settings.cache_dir or
                                           os.path.join(self._local_dir, "cache"))
        self._metrics = Metrics(COUNTERS)
        self._checksums = checksums if checksums is not None else ChecksumCache()
        self._uploaded = UploadedFiles()
        self._shared = UploadedFiles()
        self._uploader = SnapshotUploader(storage, self._uploaded, self._checksums,
                                          self._metrics, settings.upload_parallelism,
                                          self._shared)
        self._restorer = SnapshotRestorer(storage, settings.restore_parallelism,
                                          self._checksums, self._metrics)
        self._pool = ThreadPoolExecutor(settings.worker_threads,
                                        thread_name_prefix="dstl-materializer")
        # checkpoints started by snapshot_in_background(): short, so never queued behind uploads
        self._link_copier = ThreadPoolExecutor(settings.worker_threads,
                                               thread_name_prefix="dstl-link-copy")
        self._stores: dict[str, StoreSchedule] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def settings(self) -> MaterializerSettings:
        return self._settings

    # --- registration ----------------------------------------------------------------------

    def register(self, store_id: str, remote_dir: str) -> None:
        """Schedule `store_id`; its snapshots go under `remote_dir` (e.g. 'state/op/3')."""
        if not isinstance(store_id, str) or not store_id:
            raise SnapshotRequestError(f"invalid store id {store_id!r}")
        remote = check_remote_dir(remote_dir)
        with self._lock:
            self._check_open()
            existing = self._stores.get(store_id)
            if existing is not None:
                if existing.remote_dir != remote:
                    raise SnapshotRequestError(
                        f"store {store_id!r} is registered with remote directory "
                        f"{existing.remote_dir!r}, not {remote!r}")
                return
            self._stores[store_id] = StoreSchedule.create(store_id, remote, self._settings,
                                                          time.monotonic())

    def unregister(self, store_id: str) -> None:
        """Stop scheduling; snapshots in flight still finish. Forgets the store's reusable files."""
        with self._lock:
            self._stores.pop(store_id, None)
        self._uploaded.forget(store_id)
        self._shared.forget(store_id)

    def offer_references(self, store_id: str, files: Iterable[SnapshotFile]) -> None:
        """Let the next snapshots of `store_id` name these verified remote files of another
        store's snapshot in place when a local file is identical (name, size, CRC-32 as the
        other manifest records them), instead of uploading or copying it: a rescale's new
        store starts from an old store's files. Cleanup, verify and the orphan scan count
        references across the stores of a checkpoint location, so the files stay while any
        kept manifest names them."""
        for file in files:
            self._shared.add(store_id, file.key, file.dfs_path)

    # --- scheduling ------------------------------------------------------------------------

    def should_snapshot(self, store_id: str, unmaterialized_bytes: int,
                        now: float | None = None, *,
                        commits_since_snapshot: int | None = None) -> SnapshotDecision:
        """Call once per commit: counts the commit and decides.

        NO while a snapshot of the store is in flight, except BACKSTOP, which first waits for
        the in-flight one. Raises MaterializationFailedError past the failure limit.
        `commits_since_snapshot` (e.g. the length of the store's lineage) replaces the count
        of this process's calls for `everyNCommits`; without it the calls are counted.
        """
        now = time.monotonic() if now is None else now
        with self._lock:
            schedule = self._schedule(store_id)
            schedule.check_failures()
            decision = schedule.decide(unmaterialized_bytes, now, commits_since_snapshot)
            waiting = list(schedule.in_flight) if decision is SnapshotDecision.BACKSTOP else []
        if decision is not SnapshotDecision.NO:
            self._metrics.add(f"decisions_{decision.value}")
        if waiting:
            started = time.monotonic()
            wait(waiting)
            self._metrics.add("backstop_wait_seconds", time.monotonic() - started)
            with self._lock:
                schedule.check_failures()
        return decision

    def snapshot(self, db: Rdict, request: SnapshotRequest) -> Future[MaterializedHandle]:
        """Checkpoint `db` now (caller guarantees no writes meanwhile); upload in the background."""
        with self._lock:
            self._check_open()
            schedule = self._schedule(request.store_id)
        directory = self._link_copy_dir(request)
        started = time.monotonic()
        try:
            link_copy = take_link_copy(db, directory)
        except MaterializerError as exc:
            with self._lock:
                schedule.failed(None, exc)
            self._metrics.add("snapshots_failed")
            raise
        self._link_copy_taken(started)
        future: Future[MaterializedHandle] = Future()
        with self._lock:
            schedule.started(future, time.monotonic())
        self._upload(schedule, link_copy, request, future)
        return future

    def snapshot_in_background(self, db: Rdict, request: SnapshotRequest,
                               ready: Future[None] | None = None,
                               ) -> tuple[Future[None], Future[MaterializedHandle]]:
        """snapshot(), with the link copy itself (memtable flush, hard links) off the
        caller's thread: returns (taken, result). `taken` is done once the link copy no longer
        reads `db` (taken, failed or cancelled); the caller must not write to `db` nor close it
        before that, so the link copy holds exactly the state of this call. `result` is as
        snapshot()'s (a failed link copy fails it; so does a close() that cancels it).
        `ready`: done once `db` holds the state to snapshot (a write still running on
        another thread); the link copy waits for it, and fails if it failed.
        """
        with self._lock:
            self._check_open()
            schedule = self._schedule(request.store_id)
            future: Future[MaterializedHandle] = Future()
            schedule.started(future, time.monotonic())  # in flight: no second one meanwhile
        directory = self._link_copy_dir(request)
        job = functools.partial(self._link_copy_then_upload, db, request, ready, schedule,
                                future, directory)
        try:
            taken = self._link_copier.submit(job)
        except RuntimeError as exc:  # shut down by a concurrent close()
            with self._lock:
                schedule.abandoned(future)
            raise MaterializerClosedError("the materializer is closed") from exc
        taken.add_done_callback(functools.partial(self._settle_cancelled, schedule, future))
        return taken, future

    def _link_copy_then_upload(self, db: Rdict, request: SnapshotRequest,
                               ready: Future[None] | None, schedule: StoreSchedule,
                               future: Future[MaterializedHandle], directory: str) -> None:
        """On the link copy thread: wait for the caller's write, take the link copy,
        then hand it to the uploads; `future` carries every failure."""
        started = time.monotonic()
        try:
            if ready is not None:
                _await_ready(ready, request)  # the caller's write into `db` lands first
                started = time.monotonic()
            link_copy = take_link_copy(db, directory)
        except Exception as exc:
            error = exc if isinstance(exc, MaterializerError) else MaterializerError(
                f"link copy (RocksDB checkpoint) into {directory!r} failed: {exc!r}")
            with self._lock:
                schedule.failed(future, error)
            self._metrics.add("snapshots_failed")
            future.set_exception(error)
            return
        self._link_copy_taken(started)
        try:
            self._upload(schedule, link_copy, request, future)
        except MaterializerClosedError as exc:
            future.set_exception(exc)

    def _settle_cancelled(self, schedule: StoreSchedule, future: Future[MaterializedHandle],
                          taken: Future[None]) -> None:
        """close() dropped the link copy before it ran: the snapshot fails as closed."""
        if taken.cancelled():
            with self._lock:
                schedule.abandoned(future)
            future.set_exception(MaterializerClosedError("the materializer is closed"))

    def _link_copy_dir(self, request: SnapshotRequest) -> str:
        return os.path.join(
            self._link_copy_root,
            f"{local_dir_name(request.store_id)}-{request.version}-{uuid.uuid4().hex[:12]}")

    def _link_copy_taken(self, started: float) -> None:
        elapsed = time.monotonic() - started
        self._metrics.add("checkpoint_seconds_total", elapsed)
        self._metrics.set("last_checkpoint_seconds", elapsed)
        self._metrics.add("snapshots_started")

    def _upload(self, schedule: StoreSchedule, link_copy: LinkCopy,
                request: SnapshotRequest, future: Future[MaterializedHandle]) -> None:
        """Hand a taken link copy to the worker pool (`future` is already in flight)."""
        try:
            self._pool.submit(SnapshotJob(self._uploader, schedule, self._lock, self._metrics,
                                          link_copy, request, future))
        except RuntimeError as exc:  # pool shut down by a concurrent close()
            link_copy.remove()
            with self._lock:
                schedule.abandoned(future)
            raise MaterializerClosedError("the materializer is closed") from exc

    def poll(self, store_id: str) -> MaterializedHandle | None:
        """The newest snapshot completed since the last poll, or None."""
        with self._lock:
            schedule = self._schedule(store_id)
            schedule.check_failures()
            return schedule.take_completed()

    # --- restore ---------------------------------------------------------------------------

    def read_manifest(self, path: str) -> SnapshotManifest:
        return self._storage.loop.run(aread_manifest(self._storage, path))

    def check_files(self, manifest_path: str) -> tuple[SnapshotManifest, list[str]]:
        """The manifest and the files it names that are missing or of another size.

        Call it before building on a snapshot: a cleanup that ran while the snapshot was
        uploading may have deleted files it uploaded or reused. One listing per folder.
        """
        manifest = self.read_manifest(manifest_path)
        missing = self._storage.loop.run(amissing_files(self._storage, manifest))
        if missing:
            self._metrics.add("checks_missing_files")
        return manifest, missing

    def restore(self, store_id: str, manifest_path: str, target_dir: str) -> RestoredSnapshot:
        """Rebuild the snapshot in `target_dir` (created; must be empty). Open it with open_db."""
        with self._lock:
            self._check_open()
        started = time.monotonic()
        manifest = self.read_manifest(manifest_path)
        if manifest.store_id != store_id:
            raise ManifestError(f"manifest belongs to store {manifest.store_id!r}, "
                                f"not {store_id!r}", manifest_path)
        cache = FileCache(os.path.join(self._cache_root, local_dir_name(store_id)),
                          self._metrics)
        restored = self._restorer.restore(manifest, cache, target_dir)
        for file in manifest.files:  # verified bytes: safe to reuse in later snapshots
            self._uploaded.add(store_id, file.key, file.dfs_path)
        elapsed = time.monotonic() - started
        self._metrics.add("restores")
        self._metrics.add("restore_seconds_total", elapsed)
        self._metrics.set("last_restore_seconds", elapsed)
        return restored

    # --- introspection and shutdown --------------------------------------------------------

    def metrics_snapshot(self) -> dict[str, Any]:
        result: dict[str, Any] = dict(self._metrics.snapshot())
        result["checksum_cache_hits"] = self._checksums.hits
        result["checksum_cache_misses"] = self._checksums.misses
        with self._lock:
            result["in_flight"] = sum(len(s.in_flight) for s in self._stores.values())
            result["stores"] = {store_id: s.summary() for store_id, s in self._stores.items()}
        return result

    def close(self, timeout: float = 60.0) -> None:
        """Wait up to `timeout` s for snapshots in flight, then stop the worker pool."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            in_flight = [f for s in self._stores.values() for f in s.in_flight]
        _, not_done = wait(in_flight, timeout=timeout)
        self._link_copier.shutdown(wait=not not_done, cancel_futures=True)
        self._pool.shutdown(wait=not not_done, cancel_futures=True)
        if not not_done:
            shutil.rmtree(self._link_copy_root, ignore_errors=True)

    def __enter__(self) -> Materializer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _schedule(self, store_id: str) -> StoreSchedule:
        schedule = self._stores.get(store_id)
        if schedule is None:
            raise StoreNotRegisteredError(f"store {store_id!r} is not registered "
                                          f"with the materializer")
        return schedule

    def _check_open(self) -> None:
        if self._closed:
            raise MaterializerClosedError("the materializer is closed")


def _await_ready(ready: Future[None], request: SnapshotRequest) -> None:
    """Wait for the write the snapshot must contain; MaterializerError if it failed."""
    error = ready.exception()
    if error is not None:
        raise MaterializerError(f"snapshot {request.store_id!r} version {request.version}: the "
                                f"write it must contain failed: {error!r}") from error
