"""Range rescale: new partitions made from key-group ranges of the old stores, not key by key.

In the range layout every stored key carries its key group (key_groups.py) as 2 big-endian
bytes at a fixed offset of its column family's keys: 0 for most, so a partition's keys are one
contiguous range of each column family, and 8 for the timer index (after the expiry), where
they are not. New partition p owns groups [lo, hi); the old stores overlapping them are
restored (each once for the whole rescale, as rescale.py does), and p's store is made from the
one with the largest overlap (the base): a RocksDB checkpoint of it (hard links, no copy),
clipped to p's groups by two range deletes per offset-0 column family (no key read) and by
deleting the out-of-range keys of the offset-8 ones; the other overlapping stores' shares are
copied into it, a bounded range read per offset-0 column family, a filtered read of the
offset-8 ones. p's snapshot then names the files the base's committed snapshot already holds
where they are, in the base store's folder (nothing uploaded, nothing copied): cleanup, verify
and the orphan scan count references across the stores of a checkpoint location
(ops/cleanup.py), so such a file stays while any kept manifest of any store names it.

The contract is rescale_stores': new stores numbered after the newest old version with fresh
unique ids, committed as snapshots, the old stores never changed, and nothing is the
checkpoint until the caller writes the commit entry; a kill at any point leaves the old layout
whole and only files of the dead attempt, which cleanup removes.

An offset-0 share is copied as one SST file ingested whole (SstFileWriter +
ingest_external_file): measured against WriteBatches, 4 -> 6 partitions at 1e7 keys, copy +
flush 1.7 s against 4.8 s (even at 1e6). Offset-8 shares (the timer index) go by WriteBatch.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.naming import make_store_id
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.local.dirs import location_dir
from pyspark_dstl.backend.rescale.key_by_key import (
    PARALLEL_LOADS,
    RescaleError,
    RescaleStats,
    restore_bytes,
)
from pyspark_dstl.backend.rescale.key_groups import group_bytes, group_range, groups_at
from pyspark_dstl.backend.store.provider import STORES_DIR, ChangelogProvider
from pyspark_dstl.backend.store.state_backend import MATERIALIZER_DIR, StateBackend
from pyspark_dstl.backend.store.state_store import ChangelogStateStore
from pyspark_dstl.materializer.checksum import ChecksumCache
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.names import local_dir_name

log = logging.getLogger(__name__)

GroupOffset = Callable[[str], int]
"""column family -> byte offset of the key group in its stored keys (0 or 8)."""

OFFSETS = (0, 8)
CHUNK_KEYS = 100_000
PARALLEL_BUILDS = 2  # new partitions clipped, filled and committed at once


@dataclass(frozen=True)
class Piece:
    """Old store `source`'s share [lo, hi) of one new partition's key groups."""

    source: int
    lo: int
    hi: int


def pieces(partition: int, partitions: int, old: int, key_groups: int) -> list[Piece]:
    """The old stores holding part of new `partition`'s groups, the largest share first (the
    base its store is made from), ties to the lower old partition."""
    lo, hi = group_range(partition, partitions, key_groups)
    found = []
    for source in range(old):
        a, b = group_range(source, old, key_groups)
        if max(lo, a) < min(hi, b):
            found.append(Piece(source, max(lo, a), min(hi, b)))
    return sorted(found, key=lambda piece: (piece.lo - piece.hi, piece.source))


def key_bounds(lo: int, hi: int, key_groups: int) -> tuple[bytes, bytes | None]:
    """[start, end) of the stored keys of groups [lo, hi) in an offset-0 column family; the
    first range starts at the column family's start and the last ends at its end (None), so
    the ranges of any partitioning cover every key exactly once."""
    return (b"" if lo == 0 else group_bytes(lo)), (None if hi >= key_groups
                                                   else group_bytes(hi))


def in_groups(groups: np.ndarray, lo: int, hi: int, key_groups: int) -> np.ndarray:
    """Which groups fall in [lo, hi), as key_bounds does (the last range takes what is above)."""
    return (groups >= lo) & ((groups < hi) | (hi >= key_groups))


@dataclass
class _Old:
    """One old store restored and held open while new partitions use it."""

    store: ChangelogStateStore
    manifest: SnapshotManifest | None
    lock: threading.Lock = field(default_factory=threading.Lock)


class _OldStores:
    """Restores each old store once, ahead of the new partitions that need it, and releases
    it (local files removed) once the last of them is done, so the local disk holds only the
    old stores the partitions in progress overlap."""

    def __init__(self, backend: StateBackend, location: str, operator: str,
                 sources: Mapping[int, StoreCommit], users: dict[int, int],
                 stats: RescaleStats) -> None:
        self._backend = backend
        self._location = location
        self._operator = operator
        self._sources = sources
        self._users = users
        self._stats = stats
        self._loads = ThreadPoolExecutor(PARALLEL_LOADS, "dstl-range-rescale-load")
        self._loading: dict[int, Future[_Old]] = {}
        self._lock = threading.Lock()

    def prefetch(self, source: int) -> None:
        with self._lock:
            if source not in self._loading:
                self._loading[source] = self._loads.submit(self._load, source)

    def get(self, source: int) -> _Old:
        self.prefetch(source)
        return self._loading[source].result()

    def done(self, source: int) -> None:
        """One new partition no longer needs `source`: the last one releases it."""
        with self._lock:
            self._users[source] -= 1
            last = self._users[source] == 0
        if last:
            self._release(source)

    def close(self) -> None:
        self._loads.shutdown(wait=True, cancel_futures=True)
        for source in list(self._loading):
            self._release(source)

    def _load(self, source: int) -> _Old:
        began = time.monotonic()
        info = self._sources[source]
        store = self._backend.provider(self._location, self._operator, source).get_store(
            info.version, info)
        assert isinstance(store, ChangelogStateStore)
        manifest = None
        if info.materialized is not None:
            materializer = self._backend.context(self._location).materializer
            manifest = materializer.read_manifest(info.materialized.manifest_path)
        with self._lock:
            self._stats.load_seconds += time.monotonic() - began
        return _Old(store, manifest)

    def _release(self, source: int) -> None:
        with self._lock:
            loading = self._loading.pop(source, None)
        if loading is None:
            return
        if loading.done() and loading.exception() is None:
            loading.result().store.abort()
        elif not loading.done():
            loading.cancel()
        self._backend.release(self._location, self._operator, source)
        root = location_dir(self._backend.settings.local_dir, self._location)
        shutil.rmtree(os.path.join(root, STORES_DIR, self._operator, str(source)),
                      ignore_errors=True)
        if self._backend.settings.materialization.cache_dir is None:  # the restore's downloads,
            # kept in the scratch directory (a configured cache is left to its owner)
            store_id = make_store_id(self._operator, source)
            shutil.rmtree(os.path.join(root, MATERIALIZER_DIR, "cache", local_dir_name(store_id)),
                          ignore_errors=True)


def rescale_ranges(settings: BackendSettings, location: str, operator: str,
                   sources: Mapping[int, StoreCommit], partitions: int, key_groups: int,
                   group_offset: GroupOffset) -> tuple[dict[int, StoreCommit], RescaleStats]:
    """New stores for partitions 0..partitions-1 holding exactly the keys of `sources` (old
    partition -> its checkpoint info, partitions 0..n-1), each in the partition owning its
    key group; returns their checkpoint infos (not yet in any commit entry) and what it
    cost. `group_offset(cf)` says where the key group sits in cf's stored keys (0 or 8)."""
    old = len(sources)
    if sorted(sources) != list(range(old)) or old < 1:
        raise RescaleError(f"checkpoint {location!r}, operator {operator!r}: a range rescale needs "
                           f"the old partitions 0..n-1, got {sorted(sources)}; pass every old "
                           f"partition's checkpoint info")
    if not 1 <= partitions <= key_groups or not 1 <= old <= key_groups:
        raise RescaleError(f"checkpoint {location!r}, operator {operator!r}: {old} -> {partitions} "
                           f"partition(s) with {key_groups} key groups; each count must be "
                           f"1 to {key_groups}")
    started = time.monotonic()
    stats = RescaleStats(bytes_read=sum(restore_bytes(info) for info in sources.values()))
    after = max(info.version for info in sources.values())
    plans = {p: pieces(p, partitions, old, key_groups) for p in range(partitions)}
    users = {q: sum(1 for plan in plans.values() for piece in plan if piece.source == q)
             for q in range(old)}
    os.makedirs(settings.local_dir, exist_ok=True)  # the configured fast local disk
    scratch = tempfile.mkdtemp(prefix="rescale-ranges-", dir=settings.local_dir)
    try:
        checksums = ChecksumCache()  # the restored files' CRCs, for the new snapshots
        with StateBackend(settings.with_changes(local_dir=os.path.join(scratch, "old")),
                          checksums=checksums) as reading, \
                StateBackend(settings.with_changes(local_dir=os.path.join(scratch, "new")),
                             checksums=checksums) as writing:
            olds = _OldStores(reading, location, operator, sources, users, stats)
            try:
                build = _Builder(writing, location, operator, after, partitions, key_groups,
                                 group_offset, olds, stats)
                pool = ThreadPoolExecutor(PARALLEL_BUILDS, "dstl-range-rescale")
                try:
                    made = {p: pool.submit(build, p, plans[p], plans.get(p + PARALLEL_BUILDS))
                            for p in range(partitions)}
                    infos = {p: future.result() for p, future in made.items()}
                finally:  # after a failure, partitions not yet started are not made
                    pool.shutdown(wait=True, cancel_futures=True)
            finally:
                olds.close()
            metrics = writing.context(location).materializer.metrics_snapshot()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    stats.bytes_uploaded = int(metrics.get("bytes_uploaded", 0))
    stats.bytes_shared = int(metrics.get("bytes_referenced", 0))
    stats.files_shared = int(metrics.get("files_referenced", 0))
    stats.bytes_written = sum(info.materialized.total_bytes for info in infos.values()
                              if info.materialized is not None)
    stats.seconds = time.monotonic() - started
    kill_point("rescale_ranges_done")
    log.info("rescaled operator %r of %s by key-group ranges: %d to %d partition(s) in %.2f s "
             "(%d key(s) copied, %d byte(s) uploaded, %d of old stores' files named in place)",
             operator, location, old, partitions, stats.seconds, stats.keys_copied,
             stats.bytes_uploaded, stats.bytes_shared)
    return infos, stats


class _Builder:
    """Makes one new partition's store: clone of the base, clip, copies, snapshot."""

    def __init__(self, writing: StateBackend, location: str, operator: str, after: int,
                 partitions: int, key_groups: int, group_offset: GroupOffset,
                 olds: _OldStores, stats: RescaleStats) -> None:
        self._writing = writing
        self._location = location
        self._operator = operator
        self._after = after
        self._partitions = partitions
        self._key_groups = key_groups
        self._group_offset = group_offset
        self._olds = olds
        self._stats = stats
        self._lock = threading.Lock()

    def __call__(self, partition: int, plan: list[Piece],
                 ahead: list[Piece] | None) -> StoreCommit:
        try:
            for piece in plan:
                self._olds.prefetch(piece.source)
            for piece in ahead or ():
                self._olds.prefetch(piece.source)
            return self._make(partition, plan)
        finally:
            for piece in plan:
                self._olds.done(piece.source)

    def _make(self, partition: int, plan: list[Piece]) -> StoreCommit:
        lo, hi = group_range(partition, self._partitions, self._key_groups)
        base = self._olds.get(plan[0].source)
        clock = time.monotonic()
        provider = self._writing.provider(self._location, self._operator, partition)
        if not isinstance(provider, ChangelogProvider):
            raise RescaleError(f"checkpoint {self._location!r}: provider {type(provider).__name__} "
                               f"cannot be rescaled (it is not a ChangelogProvider)")
        with base.lock:
            store = provider.get_store_from_copy_after(self._after, base.store)
        try:
            if base.manifest is not None:
                self._writing.context(self._location).materializer.offer_references(
                    store.store_id, base.manifest.files)
            read = self._clip(store, base.store, lo, hi)
            clipped = time.monotonic()
            kill_point("rescale_ranges_clipped")
            copied = 0
            for piece in plan[1:]:
                piece_read, piece_copied = self._copy(store, self._olds.get(piece.source),
                                                      piece)
                read += piece_read
                copied += piece_copied
            filled = time.monotonic()
            kill_point("rescale_ranges_copied")
            info = store.commit(materialize=True)
        except BaseException:
            store.abort()
            raise
        committed = time.monotonic()
        kill_point("rescale_ranges_committed")
        if info.materialized is None:
            raise RescaleError(f"store {info.store_id!r}: the range rescale's commit produced "
                               f"no snapshot")
        self._writing.release(self._location, self._operator, partition)
        with self._lock:
            stats = self._stats
            stats.keys += read
            stats.keys_copied += copied
            stats.clip_seconds += clipped - clock
            stats.copy_seconds += filled - clipped
            stats.write_seconds += committed - filled
        return info

    def _offset(self, cf: str) -> int:
        offset = self._group_offset(cf)
        if offset not in OFFSETS:
            raise RescaleError(f"column family {cf!r}: group_offset gave {offset!r}; the key "
                               f"group sits at byte 0 or 8 of a stored key, fix the caller's "
                               f"group_offset")
        return offset

    def _clip(self, store: ChangelogStateStore, base: ChangelogStateStore, lo: int,
              hi: int) -> int:
        """Deletes from the copy of the base every key outside groups [lo, hi); returns the
        keys read (those of offset-8 column families)."""
        start, end = key_bounds(lo, hi, self._key_groups)
        read = 0
        for cf in store.column_families():
            if self._offset(cf) == 0:
                if start:
                    store.delete_range(cf, b"", start)
                if end is not None:
                    store.delete_range(cf, end, None)
                continue
            for keys, _ in base.iterator_chunks(cf, CHUNK_KEYS):
                keep = in_groups(_groups(cf, keys, 8), lo, hi, self._key_groups)
                store.delete_keys(cf, [key for key, kept in zip(keys, keep, strict=True)
                                       if not kept])
                read += len(keys)
        return read

    def _copy(self, store: ChangelogStateStore, source: _Old, piece: Piece) -> tuple[int, int]:
        """Copies `source`'s keys of groups [piece.lo, piece.hi) into `store`; returns (keys
        read, keys copied)."""
        start, end = key_bounds(piece.lo, piece.hi, self._key_groups)
        read = copied = 0
        for cf in source.store.column_families():
            if self._offset(cf) == 0:
                count = store.ingest_sorted(cf, source.store.range_chunks(cf, start, end,
                                                                          CHUNK_KEYS))
                read += count
                copied += count
                continue
            for keys, values in source.store.iterator_chunks(cf, CHUNK_KEYS):
                keep = np.flatnonzero(in_groups(_groups(cf, keys, 8), piece.lo, piece.hi,
                                                self._key_groups))
                store.ingest(cf, [keys[i] for i in keep], [values[i] for i in keep])
                read += len(keys)
                copied += len(keep)
        return read, copied


def _groups(cf: str, keys: list[bytes], offset: int) -> np.ndarray:
    try:
        return groups_at(keys, offset)
    except ValueError as exc:
        raise RescaleError(f"column family {cf!r}: {exc}; a range rescale needs the range "
                           f"layout (key group at byte {offset}), rescale this checkpoint with "
                           f"rescale_stores instead") from exc
