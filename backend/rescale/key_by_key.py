"""Rescale: the state of one operator's partitions, redistributed over a new number of them.

Every key of every old store is read once and written, as `place` gives it, to the new
partition `place` names (the caller knows the partitioning and the stored key format; this
module only moves bytes). It is the way from a layout whose keys do not carry their key group
(the migration to key groups) and works for any layout; a checkpoint already in key groups is
rescaled by moving ranges (range_rescale.py). Each new partition gets a fresh
store: empty, numbered after the newest old version, filled by ingestion straight into its
engine and committed as a snapshot, so it gets a new unique id and its own files; nothing of
the old stores is changed. The new stores become the checkpoint only when the caller writes
the commit log entry naming them (one create-only write): a kill before that leaves the old
layout whole and the new stores' files as orphans of a dead attempt, which cleanup removes;
a rerun starts over with new unique ids.

Old and new stores of one partition number share a store id, so the old ones are read through
a backend of their own with its own local directory (both under a scratch directory in the
configured `stateStore.localDir`, removed afterwards). The old stores are restored two at a
time ahead of the one being read, so the local disk may hold all of them at once, as a restore
of every partition on one host would.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.provider import ChangelogProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.backend.store.state_store import ChangelogStateStore

log = logging.getLogger(__name__)

Placement = Callable[[str, Sequence[bytes]], tuple[np.ndarray, Sequence[bytes]]]
"""(column family, stored keys) -> (the new partition of each key, the key as stored there)."""

CHUNK_KEYS = 100_000
PARALLEL_LOADS = 2  # old stores restored ahead of the one being read
PARALLEL_COMMITS = 4  # new stores snapshotting and uploading at once


class RescaleError(BackendError):
    """A rescale cannot run as asked; names the checkpoint, the operator and the fix."""


@dataclass
class RescaleStats:
    """What a rescale read and wrote."""

    keys: int = 0  # keys read one by one (a range rescale reads no key of a clipped range)
    keys_moved: int = 0  # keys whose partition number changed (rescale_stores)
    bytes_read: int = 0  # snapshot + changelog bytes of the old stores (a restore of them)
    bytes_written: int = 0  # snapshot bytes of the new stores
    load_seconds: float = 0.0  # restoring the old stores (in the background, summed)
    read_seconds: float = 0.0  # reading, routing and ingesting their keys
    write_seconds: float = 0.0  # committing the new stores' snapshots (summed)
    seconds: float = 0.0
    keys_per_partition: dict[int, int] = field(default_factory=dict)
    # a range rescale's (range_rescale.py); phases summed over the partitions made at once
    keys_copied: int = 0  # keys written one by one into a new store from another old one
    bytes_uploaded: int = 0  # snapshot bytes sent from this process
    bytes_shared: int = 0  # snapshot bytes of old stores' files named in place (never sent)
    files_shared: int = 0  # old stores' files the new snapshots name in place
    clip_seconds: float = 0.0  # checkpoint of the base store + clip to the new groups
    copy_seconds: float = 0.0  # the other old stores' shares

    def to_dict(self) -> dict[str, Any]:
        return {"keys": self.keys, "keys_moved": self.keys_moved,
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "load_seconds": round(self.load_seconds, 3),
                "read_seconds": round(self.read_seconds, 3),
                "write_seconds": round(self.write_seconds, 3),
                "seconds": round(self.seconds, 3),
                "keys_per_partition": {str(p): n for p, n
                                       in sorted(self.keys_per_partition.items())},
                "keys_copied": self.keys_copied, "bytes_uploaded": self.bytes_uploaded,
                "bytes_shared": self.bytes_shared, "files_shared": self.files_shared,
                "clip_seconds": round(self.clip_seconds, 3),
                "copy_seconds": round(self.copy_seconds, 3)}


def restore_bytes(info: StoreCommit) -> int:
    """Bytes a restore of `info` reads: its snapshot and its changelog since."""
    snapshot = info.materialized.total_bytes if info.materialized is not None else 0
    return snapshot + info.changelog.size


def rescale_stores(settings: BackendSettings, location: str, operator: str,
                   sources: Mapping[int, StoreCommit], partitions: int,
                   place: Placement) -> tuple[dict[int, StoreCommit], RescaleStats]:
    """New stores for partitions 0..partitions-1 holding exactly the keys of `sources`, each
    where and as `place` puts it; returns their checkpoint infos (not yet in any commit entry)."""
    if partitions < 1:
        raise RescaleError(f"checkpoint {location!r}, operator {operator!r}: a rescale needs at "
                           f"least 1 partition, got {partitions}")
    started = time.monotonic()
    stats = RescaleStats(keys_per_partition={p: 0 for p in range(partitions)})
    after = max((info.version for info in sources.values()), default=0)
    os.makedirs(settings.local_dir, exist_ok=True)  # the configured fast local disk
    scratch = tempfile.mkdtemp(prefix="rescale-", dir=settings.local_dir)
    try:
        reading = StateBackend(settings.with_changes(local_dir=os.path.join(scratch, "old")))
        writing = StateBackend(settings.with_changes(local_dir=os.path.join(scratch, "new")))
        with reading, writing:
            targets = [_empty_store(writing, location, operator, p, after)
                       for p in range(partitions)]
            try:
                with ThreadPoolExecutor(PARALLEL_LOADS, "dstl-rescale-load") as loads:
                    loading = {p: loads.submit(_load, reading, location, operator, p, info)
                               for p, info in sorted(sources.items())}
                    for partition, info in sorted(sources.items()):
                        _move(loading.pop(partition), partition, info, targets, place, stats)
                        reading.release(location, operator, partition)
                infos = _commit_all(targets, stats)
            except BaseException:
                for store in targets:
                    store.abort()
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    stats.seconds = time.monotonic() - started
    kill_point("rescale_stores_done")
    log.info("rescaled operator %r of %s: %d key(s) from %d to %d partition(s) in %.2f s",
             operator, location, stats.keys, len(sources), partitions, stats.seconds)
    return infos, stats


def _empty_store(backend: StateBackend, location: str, operator: str, partition: int,
                 after: int) -> ChangelogStateStore:
    provider = backend.provider(location, operator, partition)
    if not isinstance(provider, ChangelogProvider):
        raise RescaleError(f"checkpoint {location!r}: provider {type(provider).__name__} cannot be "
                           f"rescaled (it is not a ChangelogProvider)")
    return provider.get_empty_store_after(after)


def _load(reading: StateBackend, location: str, operator: str, partition: int,
          info: StoreCommit) -> tuple[ChangelogStateStore, float]:
    began = time.monotonic()
    store = reading.provider(location, operator, partition).get_store(info.version, info)
    assert isinstance(store, ChangelogStateStore)
    return store, time.monotonic() - began


def _move(loading: Future[tuple[ChangelogStateStore, float]], partition: int,
          info: StoreCommit, targets: list[ChangelogStateStore], place: Placement,
          stats: RescaleStats) -> None:
    """Every key of one old store (restored in the background) into the target stores, a
    chunk at a time."""
    source, load_seconds = loading.result()
    began = time.monotonic()
    stats.bytes_read += restore_bytes(info)
    try:
        for cf in source.column_families():
            for keys, values in source.iterator_chunks(cf, CHUNK_KEYS):
                _distribute(cf, keys, values, partition, targets, place, stats)
    finally:
        source.abort()
    stats.load_seconds += load_seconds
    stats.read_seconds += time.monotonic() - began


def _distribute(cf: str, keys: list[bytes], values: list[bytes], old_partition: int,
                targets: list[ChangelogStateStore], place: Placement,
                stats: RescaleStats) -> None:
    if not keys:
        return
    placed, stored = place(cf, keys)
    destinations = np.asarray(placed, dtype=np.int64)
    if destinations.shape != (len(keys),) or len(stored) != len(keys) or (len(keys) and (
            destinations.min() < 0 or destinations.max() >= len(targets))):
        raise RescaleError(f"column family {cf!r}: the placement gave partitions outside "
                           f"0..{len(targets) - 1} (or not one partition and key per key)")
    order = np.argsort(destinations, kind="stable")  # keeps each target's keys ascending
    bounds = np.searchsorted(destinations[order], np.arange(len(targets) + 1))
    for target, store in enumerate(targets):
        chosen = order[bounds[target]:bounds[target + 1]]
        if not len(chosen):
            continue
        store.ingest(cf, [stored[i] for i in chosen], [values[i] for i in chosen])
        stats.keys_per_partition[target] += len(chosen)
        if target != old_partition:
            stats.keys_moved += len(chosen)
    stats.keys += len(keys)


def _commit_all(targets: list[ChangelogStateStore],
                stats: RescaleStats) -> dict[int, StoreCommit]:
    """Each new store's snapshot, several uploading at once."""
    began = time.monotonic()

    def commit(store: ChangelogStateStore) -> StoreCommit:
        info = store.commit(materialize=True)
        kill_point("rescale_store_committed")
        return info

    with ThreadPoolExecutor(PARALLEL_COMMITS, "dstl-rescale-commit") as pool:
        committed = list(pool.map(commit, targets))
    infos: dict[int, StoreCommit] = {}
    for partition, info in enumerate(committed):
        if info.materialized is None:
            raise RescaleError(f"store {info.store_id!r}: the rescale's commit produced no "
                               f"snapshot")
        stats.bytes_written += info.materialized.total_bytes
        infos[partition] = info
    stats.write_seconds = time.monotonic() - began
    return infos
