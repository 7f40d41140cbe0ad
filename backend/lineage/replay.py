"""Replaying change sets into an engine, checking every version marker on the way.

Two sources: a ChangelogHandle (the normal restore from a StoreCommit; read in bounded
groups of segments) or whole changelog files of a ReplayPlan (the self-contained restore), for
which changelog.files reads each file whole and names the segment of every change set, so the
handle of what was replayed can be rebuilt.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, LineageError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.engines.columns import ColumnBlock, decode_change_blocks
from pyspark_dstl.backend.engines.sst_build import SortedRun
from pyspark_dstl.backend.lineage.completion import require_checkpoint, status_from_files
from pyspark_dstl.backend.lineage.latest import latest_writes
from pyspark_dstl.backend.lineage.resolver import ReplayPlan
from pyspark_dstl.backend.lineage.rules import HeaderMeta, MarkerCheck
from pyspark_dstl.changelog.changelog_errors import ChangelogError, FormatError, ObjectNotFoundError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_service import ChangelogService, SyncReader
from pyspark_dstl.changelog.files import ChangeSet, FileHeader, LogInFile, read_file_log

READ_GROUP_BYTES = 64 * 1024 * 1024
COALESCE_BYTES = 32 * 1024 * 1024
"""Payload bytes whose writes are coalesced into one sorted batch: the last write per key is
found by one numpy sort (lineage/latest.py), whose cost per write falls as the batch grows,
and a larger batch drops more overwritten writes. Memory stays bounded: the batch's payloads,
its index arrays and the Python objects of the writes that remain."""


@dataclass
class ReplayStats:
    change_sets: int = 0
    records: int = 0
    files: int = 0
    bytes: int = 0
    # where a replay's time goes (benchmarks/recovery): waiting for the changelog to be read,
    # decoding and checking payloads, finding each key's last write (sort, gather), and the
    # engine's write of what remains (table file and ingestion, or a WriteBatch)
    read_wait_seconds: float = 0.0
    decode_seconds: float = 0.0
    coalesce_seconds: float = 0.0
    apply_seconds: float = 0.0  # on the replay's write thread, mostly beside the rest
    apply_wait_seconds: float = 0.0  # the replay waiting for the engine write in flight


class PendingWrites:
    """The last write of each key over consecutive change sets, applied to the engine in one
    sorted batch once they hold COALESCE_BYTES of payload, and at the end of a replay.

    Equivalent to applying every record in order: a put or delete replaces the key's whole
    state, so only each key's last write decides the result (a delete that comes last stays a
    delete). A replay that fails discards its engine, so writes held back are never missed.

    A full window's engine write (building and ingesting a table file: numpy, Arrow and file
    writes, which release the GIL) runs on a thread of its own while the next window is read
    and sorted; one write at a time, in window order, so later writes land on top. Use it as
    a context manager: leaving it waits for the write in flight (the engine may be closed
    next).
    """

    def __init__(self, engine: Engine, stats: ReplayStats | None = None) -> None:
        self._engine = engine
        self._blocks: list[ColumnBlock] = []
        self._bytes = 0
        self._stats = stats if stats is not None else ReplayStats()
        self._executor: ThreadPoolExecutor | None = None
        self._writing: Future[float] | None = None

    def __enter__(self) -> PendingWrites:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if exc_info[0] is None:
                self._wait()
            elif self._writing is not None:
                self._writing.exception()  # the failure raised already wins
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def add(self, blocks: list[ColumnBlock], size: int) -> None:
        self._blocks += blocks
        self._bytes += size
        if self._bytes >= COALESCE_BYTES:
            self._apply()

    def flush(self) -> None:
        """Apply every write held and wait until the engine has them."""
        self._apply()
        self._wait()

    def _apply(self) -> None:
        if self._blocks:
            began = time.perf_counter()
            runs = latest_writes(self._blocks).runs
            self._stats.coalesce_seconds += time.perf_counter() - began
            self._wait()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, "dstl-replay-write")
            self._writing = self._executor.submit(self._write, runs)
        self._blocks = []
        self._bytes = 0

    def _write(self, runs: list[SortedRun]) -> float:
        began = time.perf_counter()
        self._engine.apply_runs(runs)
        return time.perf_counter() - began

    def _wait(self) -> None:
        if self._writing is None:
            return
        began = time.perf_counter()
        writing, self._writing = self._writing, None
        self._stats.apply_seconds += writing.result()
        self._stats.apply_wait_seconds += time.perf_counter() - began


def apply_change_set(writes: PendingWrites, change_set: ChangeSet, check: MarkerCheck,
                     where: str, stats: ReplayStats) -> None:
    for _, payload in change_set.entries:
        began = time.perf_counter()
        marker, blocks = decode_change_blocks(payload, where)
        check.check(marker, where)
        records = sum(map(len, blocks))
        stats.decode_seconds += time.perf_counter() - began
        if records:
            writes.add(blocks, len(payload))
        stats.records += records
    stats.change_sets += 1


class ChangelogReads:
    """A changelog handle's change sets, read in groups of at most READ_GROUP_BYTES with one
    group ahead: the next group downloads and decodes on the storage's loop while this one is
    applied (at most two groups in memory). The first read starts when this is made, so made
    before a snapshot's restore it downloads beside it. Use it as a context manager: leaving
    it cancels a read in flight."""

    def __init__(self, storage: ChangelogService, store_id: str,
                 handle: ChangelogHandle) -> None:
        self.handle = handle
        self._storage = storage
        self._store_id = store_id
        self._reader = storage.reader()
        self._groups = list(_groups(handle))
        self._upcoming = (_start_read(storage, self._reader, self._groups[0])
                          if self._groups else None)

    def __enter__(self) -> ChangelogReads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        upcoming, self._upcoming = self._upcoming, None
        if upcoming is not None and not upcoming.cancel() and upcoming.done():
            upcoming.exception()  # taken: a failure the replay never reached stays quiet

    def groups(self, stats: ReplayStats) -> Iterator[tuple[ChangelogHandle, list[ChangeSet]]]:
        """Each group with its change sets, in order; the wait for them goes to `stats`."""
        for index, group in enumerate(self._groups):
            began = time.perf_counter()
            change_sets = _group_change_sets(self._store_id, group, self._upcoming)
            stats.read_wait_seconds += time.perf_counter() - began
            self._upcoming = (_start_read(self._storage, self._reader, self._groups[index + 1])
                              if index + 1 < len(self._groups) else None)
            yield group, change_sets


def replay_handle(reads: ChangelogReads, engine: Engine, check: MarkerCheck) -> ReplayStats:
    """Apply the change sets of the handle `reads` reads, in SQN order; finish the marker
    check. The caller owns `reads` (made before the snapshot's restore, so the first group
    downloads beside it; leaving its context cancels a read in flight)."""
    handle = reads.handle
    stats = ReplayStats(files=len(handle.paths), bytes=handle.size)
    with PendingWrites(engine, stats) as writes:
        for group, change_sets in reads.groups(stats):
            for change_set in change_sets:
                where = (f"change set {change_set.sqn} in "
                         f"{_path_of(group, change_set.sqn)!r}")
                apply_change_set(writes, change_set, check, where, stats)
        writes.flush()
    check.finish(f"changelog handle [{handle.from_sqn}, {handle.to_sqn})")
    return stats


def _start_read(storage: ChangelogService, reader: SyncReader,
                group: ChangelogHandle) -> Future[list[ChangeSet]]:
    try:
        return storage.loop.submit(reader.aread(group))
    except Exception as exc:  # a closed loop: raised where the read's result is taken
        failed: Future[list[ChangeSet]] = Future()
        failed.set_exception(exc)
        return failed


def _group_change_sets(store_id: str, group: ChangelogHandle,
                       read: Future[list[ChangeSet]] | None) -> list[ChangeSet]:
    assert read is not None
    try:
        return read.result()
    except ObjectNotFoundError as exc:
        raise LineageError(f"store {store_id!r}: changelog file {exc.path!r} of the "
                           f"checkpoint is missing") from exc
    except FormatError as exc:
        raise CorruptCheckpointError(f"store {store_id!r}: {exc}") from exc
    except ChangelogError as exc:
        raise LineageError(f"store {store_id!r}: cannot read changelog "
                           f"{list(group.paths)}: {exc}") from exc


def _groups(handle: ChangelogHandle) -> Iterable[ChangelogHandle]:
    """Sub-handles of at most READ_GROUP_BYTES (one segment at least), so memory stays bounded."""
    group: list[Segment] = []
    size = 0
    for segment in handle.segments:
        if group and size + segment.length > READ_GROUP_BYTES:
            yield ChangelogHandle.of(handle.log_id, group[0].from_sqn, group[-1].to_sqn, group)
            group, size = [], 0
        group.append(segment)
        size += segment.length
    if group:
        yield ChangelogHandle.of(handle.log_id, group[0].from_sqn, group[-1].to_sqn, group)


def _path_of(handle: ChangelogHandle, sqn: int) -> str:
    return next((s.path for s in handle.segments if s.from_sqn <= sqn < s.to_sqn), "?")


def replay_files(storage: ChangelogService, store_id: str, plan: ReplayPlan, from_sqn: int,
                 engine: Engine, check: MarkerCheck) -> tuple[ChangelogHandle, ReplayStats]:
    """Apply every file of the plan in order; return the handle of what was replayed.

    Within one commit's files a change set may appear twice: an upload that gave up may
    still have landed before its retry in the next file. Such a repeat must be identical and
    is skipped; anything else out of SQN order is a broken lineage. Each commit's files must
    hold exactly the change sets its last upload names (completion.py).
    """
    stats = ReplayStats()
    segments: list[Segment] = []
    next_sqn = from_sqn
    with PendingWrites(engine, stats) as writes:
        next_sqn = _replay_steps(storage, store_id, plan, next_sqn, writes, check, stats,
                                 segments)
        writes.flush()
    check.finish(f"the changelog files of versions {[v for v, _, _ in plan.steps]}")
    return ChangelogHandle.of(store_id, from_sqn, next_sqn, segments), stats


def _replay_steps(storage: ChangelogService, store_id: str, plan: ReplayPlan, next_sqn: int,
                  writes: PendingWrites, check: MarkerCheck, stats: ReplayStats,
                  segments: list[Segment]) -> int:
    """replay_files' loop over the plan's commits; returns the SQN after the last one."""
    for version, unique_id, paths in plan.steps:
        seen: dict[int, bytes] = {}  # SQN -> digest, for this commit's files
        newest: FileHeader | None = None
        for path in paths:
            began = time.perf_counter()
            log = _read_log(storage, store_id, version, path)
            stats.read_wait_seconds += time.perf_counter() - began
            newest = log.header
            stats.files += 1
            stats.bytes += log.file_size
            for segment, change_set in log.located:
                where = f"change set {change_set.sqn} in {path!r}"
                digest = _digest(change_set)
                if change_set.sqn < next_sqn:
                    if seen.get(change_set.sqn) != digest:
                        raise LineageError(f"store {store_id!r}: {where} does not follow "
                                           f"SQN {next_sqn - 1}")
                    continue
                seen[change_set.sqn] = digest
                apply_change_set(writes, change_set, check, where, stats)
                segments.append(segment)
                next_sqn = change_set.sqn + 1
        if newest is not None:
            _check_completed(store_id, version, unique_id, newest, paths[-1], seen)
    return next_sqn


def _check_completed(store_id: str, version: int, unique_id: str, header: FileHeader,
                     path: str, sqns: Collection[int]) -> None:
    """The step's files hold exactly the change sets its last upload names."""
    metadata = next((log.metadata for log in header.logs if log.log_id == store_id), None)
    if metadata is None:
        raise CorruptCheckpointError(f"store {store_id!r}: changelog file {path!r} holds no "
                                     f"log of this store")
    meta = HeaderMeta.from_dict(metadata, path)
    require_checkpoint(store_id, version, unique_id, status_from_files(meta, path, sqns))


def _read_log(storage: ChangelogService, store_id: str, version: int, path: str) -> LogInFile:
    try:
        return read_file_log(storage, path, store_id)
    except ObjectNotFoundError as exc:
        raise LineageError(f"store {store_id!r}: changelog file {path!r} of version "
                           f"{version} disappeared") from exc
    except FormatError as exc:
        raise CorruptCheckpointError(f"store {store_id!r}: {exc}") from exc
    except ChangelogError as exc:
        raise LineageError(f"store {store_id!r}: cannot read {path!r}: {exc}") from exc


def _digest(change_set: ChangeSet) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for key_group, payload in change_set.entries:
        digest.update(key_group.to_bytes(4, "big"))
        digest.update(len(payload).to_bytes(8, "big"))
        digest.update(payload)
    return digest.digest()

