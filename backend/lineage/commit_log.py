"""The driver's commit log: one create-only JSON entry per committed batch.

An entry is never overwritten: a re-executed batch writes the next generation
f"commits/{batch_id}.{generation}", and readers take the highest generation. The entry format
is in commit_entry.py.
"""

from __future__ import annotations

import re
from collections.abc import Coroutine
from typing import Any, TypeVar

from pyspark_dstl.backend.errors import CommitLogError
from pyspark_dstl.backend.faults import kill_point
from pyspark_dstl.backend.lineage.commit_entry import (
    CommitEntry,
    OperatorCommit,
    decode_entry,
    encode_entry,
)
from pyspark_dstl.changelog.errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    UploadFailedError,
)
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.remote import RemoteFiles

__all__ = ["CommitEntry", "CommitLog", "OperatorCommit", "decode_entry", "encode_entry"]

COMMITS_PREFIX = "commits"
_ENTRY_NAME = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_MAX_WRITE_RACES = 8
T = TypeVar("T")


class CommitLog:
    """Blocking API over the storage loop; never call it from that loop's thread."""

    def __init__(self, storage: RemoteFiles, prefix: str = COMMITS_PREFIX) -> None:
        self._storage = storage
        self._prefix = prefix.strip("/")

    def path_of(self, batch_id: int, generation: int) -> str:
        return f"{self._prefix}/{batch_id}.{generation}"

    def write(self, batch_id: int, entry: CommitEntry) -> str:
        """Store `entry` as the next generation of `batch_id`; returns its path."""
        if entry.batch_id != batch_id:
            raise CommitLogError(f"entry of batch {entry.batch_id} written as batch {batch_id}")
        if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
            raise CommitLogError(f"batch id must be a non-negative integer, got {batch_id!r}")
        data = encode_entry(entry)
        for _ in range(_MAX_WRITE_RACES):
            generations = self.generations().get(batch_id, [])
            path = self.path_of(batch_id, generations[-1][0] + 1 if generations else 0)
            kill_point("commit_log_before")
            try:
                self._storage.loop.run(self._storage.aput(path, data))
            except UploadFailedError as exc:
                if isinstance(exc.__cause__, ObjectExistsError):
                    continue  # another writer took this generation: take the next one
                raise CommitLogError(f"cannot write commit log entry {path!r}: {exc}") from exc
            except ChangelogError as exc:
                raise CommitLogError(f"cannot write commit log entry {path!r}: {exc}") from exc
            kill_point("commit_log_after")
            return path
        raise CommitLogError(f"commit log entry of batch {batch_id}: lost {_MAX_WRITE_RACES} "
                             f"races for a generation under {self._prefix!r}")

    def generations(self) -> dict[int, list[tuple[int, ObjectInfo]]]:
        """batch id -> [(generation, object)], generations ascending; foreign names ignored."""
        infos = self._run(self._storage.alist(self._prefix + "/"), self._prefix)
        found: dict[int, list[tuple[int, ObjectInfo]]] = {}
        for info in infos:
            match = _ENTRY_NAME.match(info.path[len(self._prefix) + 1:])
            if match:
                found.setdefault(int(match[1]), []).append((int(match[2]), info))
        return {batch: sorted(gens, key=lambda g: g[0]) for batch, gens in sorted(found.items())}

    def batch_ids(self) -> list[int]:
        return list(self.generations())

    def read(self, batch_id: int) -> CommitEntry:
        generations = self.generations().get(batch_id)
        if not generations:
            raise CommitLogError(f"no commit log entry for batch {batch_id} under "
                                 f"{self._prefix!r}")
        return self._read_path(generations[-1][1].path)

    def latest(self) -> tuple[int, CommitEntry] | None:
        generations = self.generations()
        if not generations:
            return None
        batch_id = max(generations)
        return batch_id, self._read_path(generations[batch_id][-1][1].path)

    def retained(self, count: int) -> list[CommitEntry]:
        """The newest `count` committed batches, oldest first."""
        if count < 1:
            raise CommitLogError(f"retention must keep at least one batch, got {count}")
        generations = self.generations()
        kept = sorted(generations)[-count:]
        return [self._read_path(generations[b][-1][1].path) for b in kept]

    def obsolete(self, oldest_retained_batch: int) -> list[ObjectInfo]:
        """Entries of older batches, and every generation but the newest of retained ones."""
        result: list[ObjectInfo] = []
        for batch_id, gens in self.generations().items():
            drop = gens if batch_id < oldest_retained_batch else gens[:-1]
            result.extend(info for _, info in drop)
        return result

    def _read_path(self, path: str) -> CommitEntry:
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
