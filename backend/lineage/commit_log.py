"""The driver's commit log: one create-only JSON entry per committed batch.

An entry is never overwritten. Each batch's entries are generations
f"commits/{batch_id}.{generation}"; readers take the highest generation that holds an entry.
Writing needs the lease of the run holding the location (fencing.py) and takes exactly one name:
the next generation of the batch. A name already taken means another run wrote first, and the
write fails; it never moves on to a later name. A batch at or below the latest committed one is
refused unless it is an explicit re-execution (`rerun=True`) of the latest batch, which writes
that batch's next generation.

A run taking over from one it presumes dead writes fences (commit_entry.Fence) at the names the
old run would give its next entry (the next batch, and the latest batch re-executed), so a
late write of the old run finds its name taken. Readers skip fences. A fence is never deleted,
not even when retention drops its batch: the old run may be paused between its last check and
its write for any time, and a freed name would let that write land (two small files per
takeover is the price). Entry format: commit_entry.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from pyspark_dstl.backend.backend_errors import BackendError, CommitLogError, FencedError
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_entry import (
    CommitEntry,
    Fence,
    OperatorCommit,
    decode_entry,
    decode_record,
    encode_entry,
    encode_fence,
)
from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    UploadFailedError,
)
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.remote import RemoteFiles

__all__ = ["CommitEntry", "CommitLog", "Fence", "OperatorCommit", "WriteGuard", "decode_entry",
           "encode_entry"]

COMMITS_PREFIX = "commits"
_ENTRY_NAME = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_MAX_FENCE_RACES = 16
_RECENT_ENTRIES = 4
T = TypeVar("T")
Generations = dict[int, list[tuple[int, ObjectInfo]]]


def is_entry_name(name: str) -> bool:
    """Whether a name under commits/ is one this log writes (`<batch>.<generation>`; Spark's
    own commit log names its files `<batch>`)."""
    return _ENTRY_NAME.match(name) is not None


class WriteGuard(Protocol):
    """The lease of the run holding the location (fencing.CheckpointLease)."""

    @property
    def epoch(self) -> int: ...

    @property
    def run_id(self) -> str: ...

    def check(self, action: str) -> None:
        """Raise FencedError unless this run still holds the location."""


class CommitLog:
    """Blocking API over the storage loop; never call it from that loop's thread.

    `lease`: the default lease of `write` (so a run can hand out a log it writes through).
    """

    def __init__(self, storage: RemoteFiles, prefix: str = COMMITS_PREFIX,
                 lease: WriteGuard | None = None) -> None:
        self._storage = storage
        self._prefix = prefix.strip("/")
        self._lease = lease
        self._is_fence: dict[str, bool] = {}  # records are immutable: what is known stays
        self._recent: dict[str, CommitEntry] = {}  # entries just read to tell their kind

    def path_of(self, batch_id: int, generation: int) -> str:
        return f"{self._prefix}/{batch_id}.{generation}"

    # --- writing -------------------------------------------------------------------------------

    def write(self, batch_id: int, entry: CommitEntry, *, lease: WriteGuard | None = None,
              rerun: bool = False) -> str:
        """Store `entry` as batch `batch_id`'s next generation; returns its path.

        `rerun`: the batch is the latest committed one, executed again (a restarted query
        repeating a batch whose commit the engine did not record).
        """
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise CommitLogError(f"batch id must be a non-negative integer, got {batch_id!r}")
        if entry.batch_id != batch_id:
            raise CommitLogError(f"entry of batch {entry.batch_id} written as batch {batch_id}")
        guard = lease or self._lease
        if guard is None:
            raise CommitLogError(f"commit log entry of batch {batch_id} under "
                                 f"{self._prefix!r}: writing needs the lease of the run "
                                 f"holding the checkpoint (lineage/fencing.py acquire)")
        generations = self.generations()
        newest = self._newest_slot(generations)
        try:
            self._check_order(batch_id, newest[0] if newest else None, rerun)
        except CommitLogError:
            guard.check(f"write the commit log entry of batch {batch_id}")  # fenced, maybe
            raise
        taken = generations.get(batch_id, [])
        path = self.path_of(batch_id, taken[-1][0] + 1 if taken else 0)
        data = encode_entry(dataclasses.replace(entry, writer=(guard.epoch, guard.run_id)))
        guard.check(f"write the commit log entry of batch {batch_id}")
        kill_point("commit_log_before")
        try:
            self._storage.loop.run(self._storage.aput(path, data))
        except UploadFailedError as exc:
            if isinstance(exc.__cause__, ObjectExistsError):
                raise self._slot_taken(path, batch_id, guard) from exc
            raise CommitLogError(f"cannot write commit log entry {path!r}: {exc}") from exc
        except ChangelogError as exc:
            raise CommitLogError(f"cannot write commit log entry {path!r}: {exc}") from exc
        kill_point("commit_log_after")
        return path

    def _check_order(self, batch_id: int, latest: int | None, rerun: bool) -> None:
        if rerun:
            if latest != batch_id:
                raise CommitLogError(f"batch {batch_id} cannot be re-executed: the latest "
                                     f"committed batch under {self._prefix!r} is {latest}")
        elif latest is not None and batch_id <= latest:
            raise CommitLogError(
                f"batch {batch_id} is at or below the latest committed batch {latest} under "
                f"{self._prefix!r}" + (": re-executing it needs rerun=True"
                                       if batch_id == latest else ""))

    def _slot_taken(self, path: str, batch_id: int, guard: WriteGuard) -> BackendError:
        try:
            record = self._record(path)
        except (CommitLogError, ObjectNotFoundError) as exc:
            return CommitLogError(f"commit log entry {path!r} of batch {batch_id} was written "
                                  f"by another run first ({exc})")
        by = f"run {record.run_id} (epoch {record.epoch})" if isinstance(record, Fence) else (
            f"run {record.writer[1]} (epoch {record.writer[0]})" if record.writer
            else "another writer")
        return FencedError(f"commit log entry {path!r} of batch {batch_id} was taken by {by} "
                           f"first: run {guard.run_id} (epoch {guard.epoch}) no longer holds "
                           f"the checkpoint and must stop")

    def fence(self, epoch: int, run_id: str, fenced: tuple[int, str] | None) -> list[str]:
        """Take the names a run taken over would write next: the next batch after the latest
        entry and the latest batch's next generation (batch 0 on an empty log)."""
        fence = encode_fence(Fence(epoch, run_id, fenced))
        for _ in range(_MAX_FENCE_RACES):
            generations = self.generations()
            newest = self._newest_slot(generations)
            batches = [0] if newest is None else [newest[0] + 1, newest[0]]
            paths = []
            for batch in batches:
                taken = generations.get(batch, [])
                paths.append(self.path_of(batch, taken[-1][0] + 1 if taken else 0))
            try:
                for path in paths:
                    self._storage.loop.run(self._storage.aput(path, fence))
                    self._is_fence[path] = True
            except UploadFailedError as exc:
                if isinstance(exc.__cause__, ObjectExistsError):
                    continue  # the old run wrote one more entry: fence after it
                raise CommitLogError(f"cannot write the fence {path!r}: {exc}") from exc
            except ChangelogError as exc:
                raise CommitLogError(f"cannot write the fence {path!r}: {exc}") from exc
            return paths
        raise CommitLogError(f"commit log under {self._prefix!r}: entries kept appearing "
                             f"while fencing {_MAX_FENCE_RACES} times")

    # --- reading -------------------------------------------------------------------------------

    def generations(self) -> Generations:
        """batch id -> [(generation, object)], generations ascending, fences included;
        foreign names ignored."""
        infos = self._run(self._storage.alist(self._prefix + "/"), self._prefix)
        # what is known of a record stays true while it exists; forget the deleted ones, so
        # a log used for many batches keeps what it knows bounded by what is retained
        listed = {info.path for info in infos}
        for path in [p for p in self._is_fence if p not in listed]:
            del self._is_fence[path]
        found: Generations = {}
        for info in infos:
            match = _ENTRY_NAME.match(info.path[len(self._prefix) + 1:])
            if match:
                found.setdefault(int(match[1]), []).append((int(match[2]), info))
        return {batch: sorted(gens, key=lambda g: g[0]) for batch, gens in sorted(found.items())}

    def batch_ids(self, generations: Generations | None = None) -> list[int]:
        """Committed batches: those holding an entry (fences alone do not make a batch).
        `generations`: a listing just made (`generations()`), to spare another."""
        generations = self.generations() if generations is None else generations
        return [b for b, gens in generations.items() if self._entry_of(gens) is not None]

    def read(self, batch_id: int, generations: Generations | None = None) -> CommitEntry:
        generations = self.generations() if generations is None else generations
        found = self._entry_of(generations.get(batch_id, []))
        if found is None:
            raise CommitLogError(f"no commit log entry for batch {batch_id} under "
                                 f"{self._prefix!r}")
        return self._read_path(found[1].path)

    def latest(self) -> tuple[int, CommitEntry] | None:
        newest = self._newest_slot(self.generations())
        return None if newest is None else (newest[0], self._read_path(newest[2].path))

    def newest_of(self, batch_id: int) -> CommitEntry | None:
        """Batch `batch_id`'s entry (its newest generation that is not a fence), or None;
        lists only that batch's own names, so the cost stays the same however long the log
        grows (`latest` lists the whole log)."""
        prefix = f"{self._prefix}/{batch_id}."
        gens: list[tuple[int, ObjectInfo]] = []
        for info in self._run(self._storage.alist(prefix), prefix):
            match = _ENTRY_NAME.match(info.path[len(self._prefix) + 1:])
            if match and int(match[1]) == batch_id:
                gens.append((int(match[2]), info))
        found = self._entry_of(sorted(gens, key=lambda g: g[0]))
        return None if found is None else self._read_path(found[1].path)

    def retained(self, count: int) -> list[CommitEntry]:
        """The newest `count` committed batches, oldest first."""
        if count < 1:
            raise CommitLogError(f"retention must keep at least one batch, got {count}")
        generations = self.generations()
        kept: list[CommitEntry] = []
        for batch_id in sorted(generations, reverse=True):
            found = self._entry_of(generations[batch_id])
            if found is not None:
                kept.append(self._read_path(found[1].path))
                if len(kept) == count:
                    break
        return kept[::-1]

    def obsolete(self, oldest_retained_batch: int) -> list[ObjectInfo]:
        """Entries of older batches, and of a retained batch the entries below its newest
        one. Fences are never obsolete: deleting one would free the name a run taken over
        may still write to (see the module docstring)."""
        result: list[ObjectInfo] = []
        for batch_id, gens in self.generations().items():
            below: int | None = None  # generations below this one go; None: all of them
            if batch_id >= oldest_retained_batch:
                found = self._entry_of(gens)
                if found is None:
                    continue  # only fences
                below = found[0]
            result.extend(info for generation, info in gens
                          if (below is None or generation < below)
                          and self._known_entry(info))
        return result

    def _known_entry(self, info: ObjectInfo) -> bool:
        """An entry that can go: a record that cannot be read is kept (it may be a fence;
        `verify` reports it), and so is one deleted meanwhile."""
        try:
            return not self._fence_at(info)
        except (CommitLogError, ObjectNotFoundError):
            return False

    def fences(self) -> list[ObjectInfo]:
        """Every fence in the log, oldest batch first (inspect shows how many there are)."""
        return [info for gens in self.generations().values() for _, info in gens
                if self._fence_at(info)]

    def _newest_slot(self, generations: Generations) -> tuple[int, int, ObjectInfo] | None:
        """(batch, generation, object) of the newest entry, fences skipped."""
        for batch_id in sorted(generations, reverse=True):
            found = self._entry_of(generations[batch_id])
            if found is not None:
                return batch_id, found[0], found[1]
        return None

    def _entry_of(self, gens: list[tuple[int, ObjectInfo]]) -> tuple[int, ObjectInfo] | None:
        """(generation, object) of a batch's newest generation that is not a fence."""
        for generation, info in reversed(gens):
            if not self._fence_at(info):
                return generation, info
        return None

    def _fence_at(self, info: ObjectInfo) -> bool:
        """Whether the record at `info` is a fence (read once: records never change)."""
        is_fence = self._is_fence.get(info.path)
        if is_fence is None:
            record = self._record(info.path)
            is_fence = isinstance(record, Fence)
            self._is_fence[info.path] = is_fence
            if isinstance(record, CommitEntry):
                self._remember(info.path, record)
        return is_fence

    def _record(self, path: str) -> CommitEntry | Fence:
        try:
            data = self._run(self._storage.aget(path), path)
        except ObjectNotFoundError as exc:
            raise CommitLogError(f"commit log entry {path!r} disappeared while reading") from exc
        return decode_record(data, path)

    def _remember(self, path: str, entry: CommitEntry) -> None:
        while len(self._recent) >= _RECENT_ENTRIES:
            self._recent.pop(next(iter(self._recent)))
        self._recent[path] = entry

    def _read_path(self, path: str) -> CommitEntry:
        if path in self._recent:
            return self._recent[path]
        try:
            data = self._run(self._storage.aget(path), path)
        except ObjectNotFoundError as exc:
            raise CommitLogError(f"commit log entry {path!r} disappeared while reading") from exc
        return decode_entry(data, path)

    def _run(self, coro: Coroutine[Any, Any, T], path: str) -> T:
        try:
            return self._storage.loop.run(coro)
        except ObjectNotFoundError:
            raise
        except ChangelogError as exc:
            raise CommitLogError(f"commit log storage failed on {path!r}: {exc}") from exc

