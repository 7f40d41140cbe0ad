"""StoreInstance: one loaded copy of a store and where it stands in its lineage.

It owns the engine and the changelog writer, turns a transaction's writes into changelog
payloads, and at commit makes them durable, adopts a finished snapshot (FLIP-158: the
checkpoint then needs only the changelog after the snapshot's SQN, and the writer truncates
what lies before) and asks the materializer whether to start the next one. Released cleanly,
it leaves its directory to the next process of the host (see release_marker.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.engines.base import BlockWrite, Engine
from pyspark_dstl.backend.engines.columns import ColumnBlock, encode_blocks, table_blocks
from pyspark_dstl.backend.engines.records import VersionMarker
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.naming import checkpoint_label, split_store_id
from pyspark_dstl.backend.lineage.position import Position
from pyspark_dstl.backend.lineage.rules import EARLY, FinalMark, HeaderMeta, SnapshotRef
from pyspark_dstl.backend.lineage.snapshots import SnapshotId, SnapshotTracker
from pyspark_dstl.backend.lineage.store_commit import Lineage, StoreCommit
from pyspark_dstl.backend.local.release_marker import remove_marker, write_marker
from pyspark_dstl.backend.store.engine_writer import EngineCatchUp
from pyspark_dstl.backend.store.txcache import TransactionCache
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from pyspark_dstl.changelog.writer import ChangelogWriter
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle

log = logging.getLogger(__name__)


class ColumnsTable(Mapping[bytes, bytes | None]):
    """A bulk write's columns seen as the cache table an engine write takes: values() in
    block order without a dict; the dict (each key's last value) made only if asked for."""

    def __init__(self, keys: Sequence[bytes], values: Sequence[bytes]) -> None:
        self._keys = keys
        self._values = values
        self._table: dict[bytes, bytes | None] | None = None

    def values(self) -> Sequence[bytes]:  # type: ignore[override]
        return self._values

    def _dict(self) -> dict[bytes, bytes | None]:
        if self._table is None:
            self._table = dict(zip(self._keys, self._values, strict=True))
        return self._table

    def __getitem__(self, key: bytes) -> bytes | None:
        return self._dict()[key]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


@dataclass
class InstanceMetrics:
    commits: int = 0
    flushes: int = 0
    records: int = 0
    removed: int = 0  # of `records`, the deletes
    payload_bytes: int = 0
    last_commit_seconds: float = 0.0
    last_commit_flush_seconds: float = 0.0  # the final flush: encode, append, start the upload
    last_commit_upload_wait_seconds: float = 0.0  # then waiting for the changelog to be durable
    truncated_files: list[str] = field(default_factory=list)
    # flushes (benchmarks/write_path): encoding and appending payloads; engine writes made
    # inside transactions (a commit's own is counted by its catch-up)
    flush_encode_seconds: float = 0.0
    flush_engine_seconds: float = 0.0


class StoreInstance:
    def __init__(self, context: LocationContext, store_id: str, instance_dir: str, engine: Engine,
                 writer: ChangelogWriter, position: Position,
                 base_unique_id: str | None = None,
                 pending_snapshot: SnapshotId | None = None) -> None:
        """`pending_snapshot`: one the loaded checkpoint reports as still uploading (started
        by whoever committed it); awaited and adopted here once it landed, if in lineage."""
        self.context = context
        self.store_id = store_id
        self.instance_dir = instance_dir
        self.engine = engine
        self.writer = writer
        self.position = position
        self.base_unique_id = base_unique_id  # of the version held, None when not known
        self.dirty = False
        awaited = pending_snapshot if pending_snapshot in position.lineage else None
        self.snapshots = SnapshotTracker(context, store_id, awaited)
        self.metrics = InstanceMetrics()
        # a commit's engine write, applied after the commit returns (engine_writer.py)
        self.catch_up = EngineCatchUp(engine, store_id)
        self._partition = split_store_id(store_id)[1]

    def matches(self, version: int, unique_id: str | None) -> bool:
        """Whether this copy is exactly that committed version: it waits for the engine to
        catch up; a background write that failed makes the copy dirty (reloaded)."""
        if not self.catch_up.settled():
            self.dirty = True
        return (not self.dirty and self.position.version == version
                and self.position.unique_id == unique_id)

    # --- one transaction ------------------------------------------------------------------------

    def begin(self, unique_id: str) -> VersionMarker:
        """Name the files of the coming commit before anything of it can be uploaded; the
        engine holds the version it starts from before the transaction can read it."""
        self.catch_up.wait()
        position = self.position
        marker = VersionMarker(position.version + 1, unique_id, position.unique_id)
        self._set_header(marker, position.materialized, position.lineage)
        return marker

    def write(self, marker: VersionMarker, cache: TransactionCache) -> None:
        """Append a flush to the changelog as one payload and apply it to the engine."""
        self._flush(marker, cache, persist_from=None)

    def write_columns(self, marker: VersionMarker, block: ColumnBlock, keys: Sequence[bytes],
                      values: Sequence[bytes]) -> None:
        """Append one column family's bulk write (put_many columns that fill the cache on
        their own) as one payload and apply it to the engine at once, in one sorted
        WriteBatch (`keys`, `values`: the block's as objects, in block order). No transaction
        cache dict holds these writes. A table file ingested instead (as replay does) was
        measured slower here: the ingestion syncs the file and flushes the memtable inside
        the transaction, where a WriteBatch leaves both to RocksDB's background threads."""
        self.catch_up.wait()
        self.snapshots.await_checkpoint()
        began = time.perf_counter()
        payload = encode_blocks(marker, [block])
        self.writer.append(self._partition, payload)
        encoded = time.perf_counter()
        self.engine.apply_blocks([(block, ColumnsTable(keys, values))])
        self.metrics.flush_encode_seconds += encoded - began
        self.metrics.flush_engine_seconds += time.perf_counter() - encoded
        self.metrics.flushes += 1
        self.metrics.records += len(block)
        self.metrics.payload_bytes += len(payload)

    def _flush(self, marker: VersionMarker, cache: TransactionCache,
               persist_from: int | None, defer_engine: bool = False
               ) -> tuple[Future[ChangelogHandle] | None, list[BlockWrite]]:
        """Encode and append the cache as one payload, for a commit start persisting it, then
        apply it to the engine while the upload runs (RocksDB's write holds the GIL, writing
        and fsyncing the file does not), or with `defer_engine` return the engine's writes
        unapplied (the commit hands them to `catch_up`). Empties the cache, also when that
        fails. An engine that fails leaves the instance dirty; a payload persisted for a
        commit that then fails is a file no checkpoint names, which cleanup removes like a
        dead attempt's."""
        writes: list[BlockWrite] = []
        try:
            self.catch_up.wait()  # the previous commit's write precedes this one
            self.snapshots.await_checkpoint()  # a background checkpoint reads this version
            began = time.perf_counter()
            pending = cache.pending()
            deletes = cache.deletes
            records = len(cache)
            removed = cache.removes
            tables = [table for _, _, table in pending]
            blocks = table_blocks([(cf, table) for cf, _, table in pending], deletes)
            payload = encode_blocks(marker, blocks)
            self.writer.append(self._partition, payload)
            persisting = None
            if persist_from is not None:
                kill_point("changelog_persist_before")
                persisting = self.writer.persist(persist_from)
            writes = list(zip(blocks, tables, strict=True))
            encoded = time.perf_counter()
            self.metrics.flush_encode_seconds += encoded - began
            if not defer_engine:
                self.engine.apply_blocks(writes)
                self.metrics.flush_engine_seconds += time.perf_counter() - encoded
        finally:
            if not defer_engine:
                cache.clear()
            else:  # the tables stay referenced by `writes`; the cache lets go of them
                cache.detach()
        self.metrics.flushes += 1
        self.metrics.records += records
        self.metrics.removed += removed
        self.metrics.payload_bytes += len(payload)
        return persisting, writes

    def commit(self, marker: VersionMarker, cache: TransactionCache,
               materialize: bool = False) -> StoreCommit:
        """Final flush, durable changelog, snapshot bookkeeping; returns the checkpoint info.
        The changelog is durable on return; with `background_engine_write` (the default) the
        engine write starts then and whatever next uses the engine waits for it."""
        started = time.monotonic()
        defer = self.context.settings.background_engine_write
        base = self.position
        adopted = self.snapshots.finished(base, marker.version)
        if adopted is not None:
            base = base.on_snapshot(adopted)
        # the last upload says it is the last: the final flush below joins the open change set
        final = FinalMark(base.handle.to_sqn, self.writer.open_sqn + 1)
        self._set_header(marker, base.materialized, base.lineage, final)
        try:
            persisting, writes = self._flush(marker, cache, persist_from=base.handle.to_sqn,
                                             defer_engine=defer)
            assert persisting is not None
            flushed = time.monotonic()
            persisted = persisting.result()
            self.metrics.last_commit_upload_wait_seconds = time.monotonic() - flushed
            self.metrics.last_commit_flush_seconds = flushed - started
        except ChangelogError as exc:
            self.dirty = True
            raise BackendError(f"store {self.store_id!r}: commit of version {marker.version} "
                               f"({marker.unique_id}) could not persist its changelog: "
                               f"{exc}") from exc
        kill_point("changelog_persist_after")
        if defer:  # started below, once the bookkeeping no longer competes for the GIL
            self.catch_up.hold(writes, marker.version)
        try:
            self.position = base.after_commit(marker.version, marker.unique_id, persisted)
            self.base_unique_id = marker.base_unique_id
            if adopted is not None:
                self._truncate(adopted)
            snapshot = self.snapshots.maybe_start(self.engine, self.position,
                                                  self.writer.next_sqn(), materialize,
                                                  self.catch_up)
            if snapshot is not None:
                self.position = self.position.on_snapshot(snapshot)
                self._truncate(snapshot)
        finally:
            self.catch_up.start()
        self.metrics.commits += 1
        self.metrics.last_commit_seconds = time.monotonic() - started
        return self.info(marker.base_unique_id)

    def commit_snapshot_only(self, marker: VersionMarker) -> StoreCommit:
        """Commit what was ingested into the engine as one synchronous snapshot and nothing
        else: the first version of a store a rescale filled, built on no earlier version. No
        changelog file is written; the manifest, uploaded last, completes the commit."""
        started = time.monotonic()
        self.catch_up.wait()
        position = Position(marker.version, marker.unique_id, None, (), self.position.handle)
        try:
            snapshot = self.snapshots.maybe_start(self.engine, position,
                                                  self.writer.next_sqn(), True)
        except BaseException:
            self.dirty = True
            raise
        if snapshot is None:
            self.dirty = True
            raise BackendError(f"store {self.store_id!r}: the snapshot of version "
                               f"{marker.version} ({marker.unique_id}) did not complete")
        self.position = position.on_snapshot(snapshot)
        self.base_unique_id = None
        self.metrics.commits += 1
        self.metrics.last_commit_seconds = time.monotonic() - started
        return self.info(None)

    def _truncate(self, snapshot: MaterializedHandle) -> None:
        """FLIP-158: the writer forgets what the snapshot holds; remote files stay for cleanup."""
        self.metrics.truncated_files.extend(self.writer.truncate(snapshot.sqn))

    # --- reporting and shutdown -----------------------------------------------------------------

    def info(self, base_unique_id: str | None) -> StoreCommit:
        position = self.position
        if position.unique_id is None:
            raise BackendError(f"store {self.store_id!r}: version 0 has no checkpoint info")
        return StoreCommit(self.store_id, position.version, position.unique_id,
                              base_unique_id, position.handle, position.materialized,
                              position.lineage, self.snapshots.in_flight)

    def _set_header(self, marker: VersionMarker, materialized: MaterializedHandle | None,
                    lineage: Lineage, final: FinalMark | None = None) -> None:
        """Files uploaded from now on carry this header: EARLY until the commit's final flush,
        whose files carry the FinalMark (only a completed commit is a checkpoint)."""
        snapshot = None if materialized is None else SnapshotRef(
            materialized.version, materialized.unique_id, materialized.sqn,
            materialized.manifest_path)
        header = HeaderMeta(self.store_id, marker.version, marker.unique_id,
                            marker.base_unique_id, lineage, snapshot,
                            EARLY if final is None else final)
        self.writer.set_header(header.to_dict(),
                               label=checkpoint_label(marker.version, marker.unique_id))

    def close(self) -> None:
        """Close writer and engine; snapshots in flight finish on their own. A background
        engine write finishes first (a failed one was reported where it was waited for)."""
        try:
            self.writer.close()
        finally:
            try:
                self.catch_up.close()
                self.snapshots.await_checkpoint()
            finally:
                self.engine.close()

    def release(self) -> bool:
        """Close, leaving the directory reusable when it holds exactly a committed version:
        flush the engine, then write the release marker, then close. True when marked."""
        marked = False
        if not self.catch_up.settled():
            self.dirty = True
        if not self.dirty and self.position.unique_id is not None:
            try:
                self.snapshots.await_checkpoint()
                if self.engine.persist_locally():
                    write_marker(self.instance_dir, self.info(self.base_unique_id))
                    marked = True
            except (BackendError, OSError) as exc:
                log.warning("store %r: instance %r not left for reuse: %s", self.store_id,
                            self.instance_dir, exc)
        try:
            self.close()
        except BaseException:
            if marked:
                remove_marker(self.instance_dir)
            raise
        return marked
