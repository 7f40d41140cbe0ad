"""ChangelogStateStore: one transaction on a StoreInstance, with a write cache in front.

Writes go to the transaction cache (coalesced per key, read back by get). The cache is flushed
to the engine and the changelog at commit, before any scan (so scans see this transaction's
writes) and whenever it grows past its limits.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from pyspark_dstl.backend.backend_errors import StateStoreClosedError
from pyspark_dstl.backend.engines.columns import block_of_columns
from pyspark_dstl.backend.engines.records import DEFAULT_CF, VersionMarker, cf_prefix, prefix_end
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.api import BytesColumn, StateStore, bytes_column
from pyspark_dstl.backend.store.instance import StoreInstance
from pyspark_dstl.backend.store.txcache import ABSENT, TransactionCache

OPEN, COMMITTED, ABORTED = "open", "committed", "aborted"


class ChangelogStateStore(StateStore):
    def __init__(self, instance: StoreInstance, marker: VersionMarker,
                 load_metrics: Mapping[str, Any], on_end: Callable[[ChangelogStateStore], None],
                 ) -> None:
        self._instance = instance
        self._marker = marker
        settings = instance.context.settings
        self._cache = TransactionCache(settings.tx_cache_max_entries, settings.tx_cache_max_bytes)
        self._engine_get = instance.engine.get
        self._state = OPEN
        self._flushed = False
        self._load_metrics = dict(load_metrics)
        self._on_end = on_end
        self._info: StoreCommit | None = None
        self._records_before = instance.metrics.records
        self._removed_before = instance.metrics.removed
        self._ingested = 0  # keys written by ingest(): the commit must be a snapshot
        self._bulk = False  # the engine changed outside the changelog (ingest, clip, copy)

    @property
    def store_id(self) -> str:
        return self._instance.store_id

    @property
    def version(self) -> int:
        return self._marker.version - 1

    @property
    def unique_id(self) -> str:
        return self._marker.unique_id

    @property
    def is_open(self) -> bool:
        return self._state == OPEN

    # --- reads ------------------------------------------------------------------------------

    # get inlines TransactionCache.lookup: it needs the column's prefix too for the engine read

    def get(self, key: bytes, cf: str = DEFAULT_CF) -> bytes | None:
        if self._state is not OPEN:
            self._check_open()
        try:
            table, prefix, _ = self._cache.columns[cf]
        except (KeyError, TypeError):  # a new or an invalid column family
            table, prefix, _ = self._cache.column(cf)
        if type(key) is not bytes:
            key = bytes(key)  # a bytearray or memoryview reads like its bytes
        value = table.get(key, ABSENT)
        if value is ABSENT:
            return self._engine_get(prefix + key)
        return value

    def multi_get(self, keys: Iterable[bytes], cf: str = DEFAULT_CF) -> list[bytes | None]:
        self._check_open()
        table, prefix, _ = self._cache.column(cf)
        keys = [key if type(key) is bytes else bytes(key) for key in keys]
        results: list[bytes | None] = [None] * len(keys)
        missing: list[int] = []
        for index, key in enumerate(keys):
            value = table.get(key, ABSENT)
            if value is ABSENT:
                missing.append(index)
            else:
                results[index] = value
        values = self._instance.engine.multi_get([prefix + keys[i] for i in missing])
        for index, value in zip(missing, values, strict=True):
            results[index] = value
        return results

    def prefix_scan(self, prefix: bytes, cf: str = DEFAULT_CF) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        self._flush()
        start = cf_prefix(cf)
        return ((raw[len(start):], value)
                for raw, value in self._instance.engine.scan(start + bytes(prefix)))

    def iterator(self, cf: str = DEFAULT_CF) -> Iterator[tuple[bytes, bytes]]:
        return self.prefix_scan(b"", cf)

    def iterator_chunks(self, cf: str, size: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """iterator() as (keys, values) lists of up to `size` entries: a bulk read of a column
        family (a rescale reads every store whole)."""
        self._check_open()
        self._flush()
        start = cf_prefix(cf)
        width = len(start)
        for chunk in self._instance.engine.scan_chunks(start, size):
            yield [raw[width:] for raw, _ in chunk], [value for _, value in chunk]

    def range_chunks(self, cf: str, start: bytes, end: bytes | None,
                     size: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """The keys k of `cf` with start <= k < end (None: to the last) and their values, as
        (keys, values) lists of up to `size`: a rescale copies one key-group range."""
        self._check_open()
        self._flush()
        prefix = cf_prefix(cf)
        width = len(prefix)
        engine = self._instance.engine
        for chunk in engine.range_chunks(prefix + start, _physical_end(cf, end), size):
            yield [raw[width:] for raw, _ in chunk], [value for _, value in chunk]

    def checkpoint_engine(self, directory: str) -> None:
        """A RocksDB checkpoint (hard links, memtables flushed first) of this store's state in
        `directory`: a second store can start from it (provider.get_store_from_copy_after)."""
        self._check_open()
        self._flush()
        self._instance.catch_up.wait()
        self._instance.snapshots.await_checkpoint()
        self._instance.engine.checkpoint_into(directory)

    def column_families(self) -> list[str]:
        self._check_open()
        self._flush()
        return self._instance.engine.column_families()

    # --- writes -----------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes, cf: str = DEFAULT_CF) -> None:
        if self._state is not OPEN:
            self._check_open()
        cache = self._cache
        if type(key) is not bytes or type(value) is not bytes:
            cache.column(cf)  # an invalid column family is reported before a bad type
            key, value = self._as_bytes(key, value)
        if cache.put(cf, key, value):
            self._flush()

    def put_many(self, items: Iterable[tuple[bytes, bytes]] = (), cf: str = DEFAULT_CF, *,
                 keys: BytesColumn | None = None, values: BytesColumn | None = None) -> None:
        """put() for every item, in order, with one check of the store and the cf; or, given
        `keys` and `values` (columns: sequences of bytes or Arrow binary arrays), put() of
        keys[i] and values[i] for every i, written in slices without a Python call per key."""
        self._check_open()
        cache = self._cache
        cache.column(cf)
        if keys is not None or values is not None:
            if items != ():
                raise TypeError(f"store {self.store_id!r}: put_many takes items or "
                                f"keys/values, not both")
            self._put_columns(cf, keys, values)
            return
        put = cache.put
        for key, value in items:
            if type(key) is not bytes or type(value) is not bytes:
                key, value = self._as_bytes(key, value)
            if put(cf, key, value):
                self._flush()

    def _put_columns(self, cf: str, keys: BytesColumn | None,
                     values: BytesColumn | None) -> None:
        key_list, value_list = bytes_column(keys, "keys"), bytes_column(values, "values")
        if len(key_list) != len(value_list):
            raise ValueError(f"store {self.store_id!r}: put_many got {len(key_list)} keys and "
                             f"{len(value_list)} values")
        if not key_list:
            return
        if set(map(type, key_list)) != {bytes} or set(map(type, value_list)) != {bytes}:
            pairs = [self._as_bytes(k, v) for k, v in zip(key_list, value_list, strict=True)]
            key_list, value_list = [k for k, _ in pairs], [v for _, v in pairs]
        cache = self._cache
        overhead = cache.column(cf)[2]
        key_lengths = np.fromiter(map(len, key_list), np.int64, len(key_list))
        value_lengths = np.fromiter(map(len, value_list), np.int64, len(value_list))
        costs = np.cumsum(key_lengths + value_lengths + overhead)
        start = 0
        while start < len(key_list):
            stop = cache.filling_slice(costs, start, len(key_list)) if not len(cache) else None
            if stop is not None:  # the slice alone fills the cache: flushed from the columns
                self._flushed = True
                keys, values = key_list[start:stop], value_list[start:stop]
                self._instance.write_columns(self._marker, block_of_columns(
                    cf, keys, values, key_lengths[start:stop], value_lengths[start:stop]),
                    keys, values)
                start = stop
                continue
            start = cache.put_columns(cf, key_list, value_list, costs, start)
            if cache.is_full():
                self._flush()

    def remove(self, key: bytes, cf: str = DEFAULT_CF) -> None:
        if self._state is not OPEN:
            self._check_open()
        cache = self._cache
        cache.column(cf)
        if type(key) is not bytes:
            key = self._key_as_bytes(key)
        cache.remove(cf, key)
        if cache.entries >= cache.max_entries or cache.bytes >= cache.max_bytes:
            self._flush()

    def remove_many(self, keys: Iterable[bytes], cf: str = DEFAULT_CF) -> None:
        """remove() for every key, in order, with one check of the store and the cf."""
        self._check_open()
        cache = self._cache
        cache.column(cf)
        remove = cache.remove
        for key in keys:
            if type(key) is not bytes:
                key = self._key_as_bytes(key)
            remove(cf, key)
            if cache.entries >= cache.max_entries or cache.bytes >= cache.max_bytes:
                self._flush()

    # --- end of the transaction -------------------------------------------------------------

    def ingest(self, cf: str, keys: list[bytes], values: list[bytes]) -> None:
        """Write straight into the engine, not into the changelog: how a rescale fills a new
        partition's store. Only into a transaction with no other writes, which then commits
        as a snapshot alone (`commit(materialize=True)`, no changelog file): the snapshot is
        the one durable copy of these keys."""
        self._check_open()
        if len(keys) != len(values):
            raise ValueError(f"store {self.store_id!r}: ingest of {len(keys)} key(s) and "
                             f"{len(values)} value(s)")
        self._check_bulk()
        if not keys:
            return
        self._flushed = self._bulk = True
        prefix = cf_prefix(cf)
        self._instance.engine.apply_ordered([prefix + key for key in keys], values,
                                            deletes=False)
        self._ingested += len(keys)

    def ingest_sorted(self, cf: str,
                      chunks: Iterable[tuple[list[bytes], list[bytes]]]) -> int:
        """ingest() of every (keys, values) chunk, keys ascending across the chunks and new
        to the store: RocksDB writes them as one SST file it ingests whole (a rescale's
        copied share); returns the keys written."""
        self._check_bulk()
        prefix = cf_prefix(cf)
        scratch = os.path.join(self._instance.instance_dir, f"ingest-{uuid.uuid4().hex}.sst")
        count = self._instance.engine.ingest_sorted(
            (([prefix + key for key in keys], values) for keys, values in chunks), scratch)
        if count:
            self._flushed = self._bulk = True
            self._ingested += count
        return count

    def delete_range(self, cf: str, start: bytes, end: bytes | None) -> None:
        """Delete every key k of `cf` with start <= k < end (None: to the last) straight in
        the engine (RocksDB: one range tombstone, nothing read), under ingest()'s rules: a
        rescale clipping a copy of an old store to a partition's key groups."""
        self._check_bulk()
        self._flushed = self._bulk = True
        self._instance.engine.delete_range(cf_prefix(cf) + start, _physical_end(cf, end))

    def delete_keys(self, cf: str, keys: list[bytes]) -> None:
        """Delete these keys of `cf` (ascending) straight in the engine, under ingest()'s
        rules: a rescale clipping a column family whose key groups are not a range."""
        self._check_bulk()
        if not keys:
            return
        self._flushed = self._bulk = True
        prefix = cf_prefix(cf)
        self._instance.engine.apply_ordered([prefix + key for key in keys], [None] * len(keys))

    def _check_bulk(self) -> None:
        self._check_open()
        if len(self._cache) or (self._flushed and not self._bulk):
            raise StateStoreClosedError(f"store {self.store_id!r}: ingest only into a "
                                        f"transaction without other writes")

    def _started_from_copy(self) -> None:
        """The engine began as a copy of another store's (provider): commit as a snapshot."""
        self._flushed = self._bulk = True

    def commit(self, *, materialize: bool = False) -> StoreCommit:
        self._check_open()
        if self._bulk and (not materialize or len(self._cache)):
            self.abort()
            raise StateStoreClosedError(
                f"store {self.store_id!r}: its engine was written without the changelog "
                f"({self._ingested} key(s) ingested, or ranges deleted, or it began as a copy "
                f"of another store), so the commit must be a snapshot of them alone: call "
                f"commit(materialize=True) with no other writes")
        try:
            if self._bulk:
                info = self._instance.commit_snapshot_only(self._marker)
            else:
                info = self._instance.commit(self._marker, self._cache, materialize)
        except BaseException:
            self._instance.dirty = True
            self._end(ABORTED)
            raise
        self._info = info
        self._end(COMMITTED)
        return info

    def abort(self) -> None:
        """Drop the transaction; after a flush the local copy is stale and gets reloaded."""
        if self._state != OPEN:
            return
        self._cache.clear()
        if self._flushed:
            self._instance.dirty = True
        self._end(ABORTED)

    def metrics(self) -> Mapping[str, Any]:
        instance = self._instance.metrics
        snapshots = self._instance.snapshots
        position = self._instance.position
        return {
            **self._load_metrics,
            "state": self._state,
            "cache_entries": len(self._cache),
            "cache_bytes": self._cache.size_bytes,
            "commits": instance.commits,
            "flushes": instance.flushes,
            "records_written": instance.records,
            "payload_bytes": instance.payload_bytes,
            "flush_encode_seconds": instance.flush_encode_seconds,
            "flush_engine_seconds": instance.flush_engine_seconds,
            "last_commit_seconds": instance.last_commit_seconds,
            "commit_flush_seconds": instance.last_commit_flush_seconds,
            "commit_upload_wait_seconds": instance.last_commit_upload_wait_seconds,
            "snapshots_started": snapshots.started,
            "snapshots_adopted": snapshots.adopted,
            "snapshots_dropped": snapshots.dropped,
            "snapshots_dropped_missing_files": snapshots.missing_files,
            "snapshot_checkpoint_wait_seconds": snapshots.write_wait_seconds,
            "engine_catch_up_wait_seconds": self._instance.catch_up.wait_seconds,
            "engine_background_write_seconds": self._instance.catch_up.write_seconds,
            "snapshot_pending": snapshots.in_flight is not None,
            "changelog_bytes_since_snapshot": position.handle.size,
            "materialized_version": (position.materialized.version
                                     if position.materialized else None),
            "estimated_keys": self._instance.engine.estimated_keys(),
            "rows_updated": (instance.records - self._records_before
                             - (instance.removed - self._removed_before)),
            "rows_removed": instance.removed - self._removed_before,
            "memory_bytes": self._instance.engine.memory_bytes(),
            "disk_bytes": self._instance.engine.disk_bytes(),
        }

    # --- internals --------------------------------------------------------------------------

    def _flush(self) -> None:
        if len(self._cache):
            self._flushed = True
            self._instance.write(self._marker, self._cache)

    def _as_bytes(self, key: object, value: object) -> tuple[bytes, bytes]:
        """Keys and values of a bytes subclass as plain bytes; TypeError for anything else."""
        if not isinstance(key, bytes) or not isinstance(value, bytes):
            raise TypeError(f"store {self.store_id!r}: keys and values must be bytes, got "
                            f"{type(key).__name__} / {type(value).__name__}")
        return bytes(key), bytes(value)

    def _key_as_bytes(self, key: object) -> bytes:
        if not isinstance(key, bytes):
            raise TypeError(f"store {self.store_id!r}: keys must be bytes, got "
                            f"{type(key).__name__}")
        return bytes(key)

    def _end(self, state: str) -> None:
        self._state = state
        self._cache.release()
        self._on_end(self)

    def _check_open(self) -> None:
        if self._state != OPEN:
            raise StateStoreClosedError(f"store {self.store_id!r} (version {self.version}, "
                                        f"id {self.unique_id}) is {self._state}")


def _physical_end(cf: str, end: bytes | None) -> bytes:
    """The stored key ending keys below `end` of `cf`; None: past every key of `cf`."""
    prefix = cf_prefix(cf)
    if end is not None:
        return prefix + end
    past = prefix_end(prefix)
    assert past is not None  # a column family's prefix ends in the separator, never 0xff
    return past
