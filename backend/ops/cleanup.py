"""Retention and cleanup: delete what no retained checkpoint needs, below the retained range.

Per store, from the retained StoreCommits (the newest min_batches_to_retain commit log
entries, plus any in-flight infos the caller knows of):
- referenced: every changelog file of their handles, their snapshot manifests;
- kept manifests: the referenced ones and those at or above the floor;
- the floor is the oldest retained version, lowered to the version of a snapshot the newest
  checkpoint reports in flight (not adopted yet, whether or not its manifest has landed);
- every file carries a version in its name (changelogs and manifests: the commit; snapshot
  data files under sst/ and meta/: the snapshot that first uploaded them). A file goes when it
  is not referenced and its version is below the floor. Files at or above the floor may belong
  to attempts or snapshot uploads still running, so they stay until the floor passes them;
  that is also how an orphan of a crashed attempt eventually goes.

Snapshot data files are counted across the stores of the checkpoint location: a manifest may
name another store's files in place (a rescale's new store starts from an old store's files,
rescale/ranges.py), so a data file stays while any kept manifest of any store names it. Every
manifest of a store directory no retained entry names (an old partition after a rescale to
fewer, the new stores of a rescale not yet committed or abandoned) counts as kept: such
directories are never cleaned, and what they name stays. One manifest that cannot be read
leaves every store's data files alone, since the files it names are unknown.

Manifests go before the data files they name, so a manifest never names a deleted file (what
`verify` and an adopting commit check), even when a cleanup is killed halfway; a repeated run
finds the data files by their version and deletes them then.

Uploads killed halfway leave temp files that no listing shows (LocalStorage's '.tmp-*'), so no
reference rule can reach them: each cleaned store directory and the commit log directory are
swept for such leftovers older than a grace period no live upload can reach.

Change feeds that recorded their position (feed_holds.py) keep the batches they still need
beyond the retained ones, up to a bound; the report names the feeds held for and let go.
"""

from __future__ import annotations

import logging
import math
import posixpath
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.backend_settings import BackendSettings, FencingSettings
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.fencing.lease import CheckpointLease, acquire, held_lease
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog, WriteGuard
from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.lineage.store_listing import StoreDirListing, list_stores
from pyspark_dstl.backend.ops.attempts import attempts_of, read_newest_header
from pyspark_dstl.backend.ops.feed_holds import Retention, feed_positions, retention_with_feeds
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.manifest_listing import aread_manifest
from pyspark_dstl.materializer.materializer_errors import MaterializerError
from pyspark_dstl.materializer.names import parse_uploaded_version
from pyspark_dstl.materializer.remote import RemoteFiles

MIN_INCOMPLETE_GRACE = 300.0
"""Seconds: the least age at which a temp file counts as left behind by a dead upload."""
INCOMPLETE_GRACE_ATTEMPTS = 10
"""Attempt timeouts a temp file must have outlived to count as left behind."""
log = logging.getLogger(__name__)


class CleanableFiles(RemoteFiles, Protocol):
    """RemoteFiles plus what the cleanup needs from ChangelogService."""

    @property
    def settings(self) -> ChangelogSettings: ...

    @property
    def url(self) -> str: ...

    async def aremove_incomplete_uploads(self, prefix: str, grace: float, *,
                                         dry_run: bool = False) -> list[ObjectInfo]: ...


def default_incomplete_grace(settings: ChangelogSettings) -> float:
    """How old a temp file must be before it is taken for the leftover of a dead upload.

    An upload's temp file lives for one attempt (bounded by retry.attemptTimeout), though a
    blocked write or fsync can keep its worker thread busy past the timeout: ten attempt
    timeouts, and at least 5 minutes against paused processes and clock skew between hosts
    sharing a file system. Removing a live one would fail that attempt, never damage an object.
    """
    return max(INCOMPLETE_GRACE_ATTEMPTS * settings.attempt_timeout, MIN_INCOMPLETE_GRACE)


@dataclass
class SharedFiles:
    """Snapshot data files named by the kept manifests of every store of a location, with how
    many name each; problems: a manifest that could not be read (nothing is then known)."""

    references: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def add(self, manifest: SnapshotManifest) -> None:
        self.references.update(f.dfs_path for f in manifest.files)


@dataclass
class StoreCleanup:
    store_id: str
    floor: int  # files below it go unless referenced
    newest: int = 0  # the newest retained version
    delete: list[ObjectInfo] = field(default_factory=list)
    references: Counter[str] = field(default_factory=Counter)
    unrecognized: list[str] = field(default_factory=list)  # data files without a version
    uncommitted: list[str] = field(default_factory=list)  # attempts removed: never completed
    problems: list[str] = field(default_factory=list)


@dataclass
class CleanupReport:
    dry_run: bool
    stores: list[StoreCleanup] = field(default_factory=list)
    commit_entries: list[ObjectInfo] = field(default_factory=list)
    unknown_stores: list[str] = field(default_factory=list)
    incomplete_grace: float = MIN_INCOMPLETE_GRACE
    incomplete_uploads: list[ObjectInfo] = field(default_factory=list)  # temp files removed
    deleted_by: tuple[int, str] | None = None  # (epoch, run id) of the run that deleted
    retention: Retention | None = None  # the batches kept, with the change feeds' holds
    shared_problems: list[str] = field(default_factory=list)  # no data file deleted anywhere

    @property
    def files(self) -> list[str]:
        return ([info.path for store in self.stores for info in store.delete]
                + [info.path for info in self.commit_entries])

    @property
    def bytes(self) -> int:
        return (sum(info.size for store in self.stores for info in store.delete)
                + sum(info.size for info in self.commit_entries))

    @property
    def problems(self) -> list[str]:
        return [problem for store in self.stores
                for problem in store.problems] + self.shared_problems


class Cleaner:
    def __init__(self, storage: CleanableFiles, incomplete_grace: float | None = None) -> None:
        self._storage = storage
        self._grace = (default_incomplete_grace(storage.settings) if incomplete_grace is None
                       else incomplete_grace)
        if not math.isfinite(self._grace) or self._grace < 0:
            raise BackendError(f"incomplete_grace must be a finite number of seconds >= 0, "
                               f"got {incomplete_grace!r}")

    def run(self, entries: Sequence[CommitEntry], *, in_flight: Iterable[StoreCommit] = (),
            commit_log: CommitLog | None = None, dry_run: bool = True,
            lease: WriteGuard | None = None) -> CleanupReport:
        """Clean every store the retained `entries` name; delete nothing when dry_run.
        Deleting needs the lease of the run holding the location, checked before each delete."""
        if not dry_run and lease is None:
            raise BackendError("cleanup: deleting needs the lease of the run holding the "
                               "checkpoint")
        report = CleanupReport(dry_run, incomplete_grace=self._grace)
        retained: dict[str, list[StoreCommit]] = {}
        for entry in entries:
            for info in entry.infos():
                retained.setdefault(info.store_id, []).append(info)
        extra: dict[str, list[StoreCommit]] = {}
        for info in in_flight:
            extra.setdefault(info.store_id, []).append(info)
        shared = SharedFiles()
        planned: list[tuple[StoreDirListing, StoreCleanup]] = []
        for store_id, listing in list_stores(self._storage).items():
            if store_id not in retained:
                report.unknown_stores.append(store_id)
                self._count_unknown(listing, shared)
                continue
            plan = self.plan_references(listing, retained[store_id], extra.get(store_id, []),
                                        shared)
            planned.append((listing, plan))
        for listing, plan in planned:
            self.plan_deletes(listing, plan, shared)
            report.stores.append(plan)
        report.shared_problems = shared.problems
        if commit_log is not None and entries:
            report.commit_entries = commit_log.obsolete(min(e.batch_id for e in entries))
        sweep = [store_dir(store.store_id) + "/" for _, store in planned]
        if commit_log is not None:
            sweep.append(posixpath.dirname(commit_log.path_of(0, 0)) + "/")
        if lease is not None and not dry_run:
            lease.check("start deleting")
            report.deleted_by = (lease.epoch, lease.run_id)
        for prefix in sweep:
            report.incomplete_uploads += self._storage.loop.run(
                self._storage.aremove_incomplete_uploads(prefix, self._grace, dry_run=dry_run))
        if lease is not None and not dry_run:
            self._delete(report, lease)
        return report

    def plan_references(self, listing: StoreDirListing, committed: list[StoreCommit],
                        in_flight: list[StoreCommit], shared: SharedFiles) -> StoreCleanup:
        """The store's own references (changelogs, manifests) and its kept manifests, whose
        files are added to `shared`."""
        infos = committed + in_flight
        plan = StoreCleanup(listing.store_id, _floor(committed, infos))
        plan.newest = max(info.version for info in committed)
        for info in infos:  # a reference count per file: how many retained things name it
            plan.references.update(info.changelog.paths)
            if info.materialized is not None:
                plan.references[info.materialized.manifest_path] += 1
        referenced_manifests = {path for path in plan.references if path.endswith(".snapshot")}
        in_range = {obj.path for name, obj in listing.manifests if name.version >= plan.floor}
        manifests = self._read_manifests(referenced_manifests | in_range, plan.store_id,
                                         plan.problems)
        if plan.problems:
            shared.problems.append(f"store {plan.store_id!r}: a kept manifest cannot be read, "
                                   f"so no store's snapshot data files are deleted")
            return plan
        for path in referenced_manifests | in_range:
            if path not in referenced_manifests:
                plan.references[path] += 1  # an attempt in the retained range may adopt it
            shared.add(manifests[path])
        return plan

    def plan_deletes(self, listing: StoreDirListing, plan: StoreCleanup,
                     shared: SharedFiles) -> None:
        """What goes from the store's directory: data files no kept manifest of any store
        names, and manifests and changelogs the store no longer references, all below the
        floor; then attempts that never completed."""
        if plan.problems:
            return
        for obj in listing.data_files:
            version = parse_uploaded_version(posixpath.basename(obj.path))
            if version is None:
                plan.unrecognized.append(obj.path)
            elif not shared.problems and not shared.references[obj.path] \
                    and version < plan.floor:
                plan.delete.append(obj)
            elif shared.references[obj.path]:
                plan.references[obj.path] = shared.references[obj.path]
        for name, obj in [*listing.manifests, *listing.changelogs]:
            if not plan.references[obj.path] and name.version < plan.floor:
                plan.delete.append(obj)
        self._plan_uncommitted(listing, plan.newest, plan)

    def _count_unknown(self, listing: StoreDirListing, shared: SharedFiles) -> None:
        """Every manifest of a directory no retained entry names stays, and so does what it
        names (its own files and any other store's)."""
        problems: list[str] = []
        manifests = self._read_manifests({obj.path for _, obj in listing.manifests},
                                         listing.store_id, problems)
        for manifest in manifests.values():
            shared.add(manifest)
        if problems:
            shared.problems += [f"{problem}; so no store's snapshot data files are deleted"
                                for problem in problems]

    def _plan_uncommitted(self, listing: StoreDirListing, newest: int,
                          plan: StoreCleanup) -> None:
        """Attempts from the floor up to the newest committed version that never completed
        their commit (aborted or crashed after early uploads) go once older than the grace:
        the lineage has passed their version, so none can become part of it any more."""
        now_ms = time.time() * 1000
        for attempt in attempts_of(listing).values():
            if not plan.floor <= attempt.version <= newest \
                    or any(plan.references[info.path] for info in attempt.files):
                continue
            try:
                newest_header = read_newest_header(self._storage, listing.store_id, attempt)
            except BackendError as exc:
                plan.problems.append(f"store {listing.store_id!r}: attempt {attempt.label} "
                                     f"left alone: {exc}")
                continue
            age = (now_ms - newest_header.file.created_ms) / 1000
            if not newest_header.status.is_checkpoint and age >= self._grace:
                plan.delete.extend(attempt.files)
                plan.uncommitted.append(attempt.label)

    def _read_manifests(self, paths: set[str], store_id: str,
                        problems: list[str]) -> dict[str, SnapshotManifest]:
        """The kept manifests; one that cannot be read stops the store's cleanup (the data
        files it names are unknown)."""
        manifests: dict[str, SnapshotManifest] = {}
        for path in sorted(paths):
            try:
                manifests[path] = self._storage.loop.run(aread_manifest(self._storage, path))
            except MaterializerError as exc:
                problems.append(f"store {store_id!r}: snapshot manifest {path!r} cannot be "
                                f"read, the store is not cleaned: {exc}")
        return manifests

    def _delete(self, report: CleanupReport, lease: WriteGuard) -> None:
        """Manifests of every store first, then data files, then changelogs: a manifest
        never names a deleted file, not even another store's, and a rerun finds what is
        left by its version."""
        for kind in ("snapshot", "data", "changelog"):
            for store in report.stores:
                paths = sorted(info.path for info in store.delete if _kind(info.path) == kind)
                if paths:
                    lease.check(f"delete {len(paths)} file(s) of store {store.store_id!r}")
                    kill_point("cleanup_delete")
                    self._storage.loop.run(self._storage.adelete_many(paths))
        if report.commit_entries:
            lease.check(f"delete {len(report.commit_entries)} commit log entries")
            kill_point("cleanup_delete")
            self._storage.loop.run(self._storage.adelete_many(
                [info.path for info in report.commit_entries]))


def _floor(committed: list[StoreCommit], infos: list[StoreCommit]) -> int:
    """Oldest retained version, or the version of the snapshot the newest checkpoint reports
    in flight if older: uploading, or landed and not adopted yet (a later commit may still
    adopt it, so its manifest, and with it every file it names, stays)."""
    floor = min(info.version for info in committed)
    pending = max(infos, key=lambda info: info.version).pending_snapshot
    if pending is not None:
        floor = min(floor, pending[0])
    return floor


def _kind(path: str) -> str:
    if path.endswith(".snapshot"):
        return "snapshot"
    if path.endswith(".changelog"):
        return "changelog"
    return "data"


def cleanup_checkpoint(storage: CleanableFiles, retain: int, *, dry_run: bool = True,
                       in_flight: Iterable[StoreCommit] = (),
                       incomplete_grace: float | None = None,
                       lease: CheckpointLease | None = None,
                       fencing: FencingSettings | None = None,
                       feed_hold_limit: int | None = None) -> CleanupReport:
    """Keep the newest `retain` commit log entries and what they need; clean the rest.

    Temp files of uploads killed halfway, and attempts that never completed their commit, go
    once older than `incomplete_grace` seconds (default: default_incomplete_grace of the
    storage's settings). Deleting is done as the run holding the location: `lease`, or else the
    run of this process that holds it, or else a run taken for the cleanup and let go after
    it (CheckpointHeldError while another run holds the location: stop that run first).
    Change feeds that recorded a position keep up to `feed_hold_limit` more batches
    (feed_holds.py; None: the default of `stateStore.maxBatchesHeldForFeeds`).
    """
    commit_log = CommitLog(storage)
    cleaner = Cleaner(storage, incomplete_grace)
    if dry_run:
        kept = retention(storage, commit_log, retain, feed_hold_limit)
        report = cleaner.run(commit_log.retained(kept.batches), in_flight=in_flight,
                             commit_log=commit_log, dry_run=True)
        report.retention = kept
        return report
    held = lease or held_lease(storage)
    own = held is None
    if held is None:
        held = acquire(storage, fencing or FencingSettings(), purpose="cleanup")
    try:
        with held.use():
            kept = retention(storage, commit_log, retain, feed_hold_limit)
            report = cleaner.run(commit_log.retained(kept.batches), in_flight=in_flight,
                                 commit_log=commit_log, dry_run=False, lease=held)
            report.retention = kept
            return report
    finally:
        if own:
            held.release("cleanup done")


def retention(storage: CleanableFiles, commit_log: CommitLog, retain: int,
              feed_hold_limit: int | None = None) -> Retention:
    """The newest `retain` batches, and more for the change feeds that still need them (at
    most `feed_hold_limit` more; None: the setting's default)."""
    limit = (BackendSettings().max_batches_held_for_feeds if feed_hold_limit is None
             else feed_hold_limit)
    positions = feed_positions(storage)
    if not positions:
        return Retention(retain)
    found = retention_with_feeds(commit_log.batch_ids(), retain, positions, limit)
    for feed, position in found.released.items():
        log.warning("cleanup of %s: change feed %r still needs batch %d, more than "
                    "maxBatchesHeldForFeeds=%d batches beyond minBatchesToRetain=%d; it is "
                    "let go and fails at its next read", storage.url, feed, position, limit,
                    retain)
    return found
