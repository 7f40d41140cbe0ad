"""One commit log entry: the StoreCommit of every store of every operator at a batch.

Stored as JSON with a magic string, a format version and a SHA-256 of the canonical body, so
a damaged entry is reported with its path instead of being half-read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.backend_errors import CommitLogCorruptError, CommitLogError
from pyspark_dstl.backend.lineage.naming import make_store_id
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.core.checksummed_json import RecordKind

MAGIC = "DSTL-COMMIT"
FENCE_MAGIC = "DSTL-FENCE"
FORMAT_VERSION = 2
LAYOUT = "layout"
"""The `extra` field of an entry whose stored keys carry their key group
(backend/rescale/key_groups.py). Such an entry is written as format version 2, which releases
from before key groups refuse by name, instead of looking up keys they would not find; every
other entry and fence is written as version 1, which every release reads."""
RECORD = RecordKind("commit log entry", (MAGIC, FENCE_MAGIC), "entry", FORMAT_VERSION,
                    CommitLogCorruptError, first_version=1)


@dataclass(frozen=True)
class OperatorCommit:
    """One stateful operator's stores at a batch: partition -> StoreCommit."""

    num_partitions: int
    stores: Mapping[int, StoreCommit]


@dataclass(frozen=True)
class CommitEntry:
    """`writer`: (epoch, run id) of the run that wrote it; None in entries written before
    fencing (lineage/fencing.py) existed."""

    batch_id: int
    operators: Mapping[str, OperatorCommit]
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    extra: Mapping[str, Any] = field(default_factory=dict)
    writer: tuple[int, str] | None = None

    def __post_init__(self) -> None:
        for operator, commit in self.operators.items():
            for partition, info in commit.stores.items():
                expected = make_store_id(operator, partition)
                if info.store_id != expected:
                    raise CommitLogError(f"commit entry of batch {self.batch_id}: store "
                                         f"{expected!r} holds info of {info.store_id!r}")
                if not 0 <= partition < commit.num_partitions:
                    raise CommitLogError(f"commit entry of batch {self.batch_id}: partition "
                                         f"{partition} of operator {operator!r} is outside "
                                         f"0..{commit.num_partitions - 1}")

    def infos(self) -> Iterator[StoreCommit]:
        for commit in self.operators.values():
            yield from commit.stores.values()

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "operators": {
                op: {"num_partitions": c.num_partitions,
                     "stores": {str(p): info.to_dict() for p, info in sorted(c.stores.items())}}
                for op, c in self.operators.items()
            },
            "created_ms": self.created_ms,
            "extra": dict(self.extra),
            "writer": ({"epoch": self.writer[0], "run_id": self.writer[1]}
                       if self.writer is not None else None),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitEntry:
        operators = {
            str(op): OperatorCommit(
                num_partitions=int(c["num_partitions"]),
                stores={int(p): StoreCommit.from_dict(info)
                        for p, info in c["stores"].items()},
            )
            for op, c in data["operators"].items()
        }
        writer = data.get("writer")
        return cls(int(data["batch_id"]), operators, int(data["created_ms"]),
                   dict(data.get("extra", {})),
                   (int(writer["epoch"]), str(writer["run_id"])) if writer else None)


@dataclass(frozen=True)
class Fence:
    """Written by a run taking over from one it presumes dead, at the names that run would
    give its next entries: the old run can then never add an entry after the takeover."""

    epoch: int
    run_id: str
    fenced: tuple[int, str] | None  # (epoch, run id) of the run taken over
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "run_id": self.run_id,
                "fenced": list(self.fenced) if self.fenced else None,
                "created_ms": self.created_ms}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fence:
        fenced = data.get("fenced")
        return cls(int(data["epoch"]), str(data["run_id"]),
                   (int(fenced[0]), str(fenced[1])) if fenced else None,
                   int(data["created_ms"]))


def encode_fence(fence: Fence) -> bytes:
    return RECORD.encode(fence.to_dict(), FENCE_MAGIC, version=1)


def encode_entry(entry: CommitEntry) -> bytes:
    return RECORD.encode(entry.to_dict(), MAGIC, version=2 if LAYOUT in entry.extra else 1)


def decode_entry(data: bytes, path: str) -> CommitEntry:
    """A commit entry; a fence or anything else at `path` is CommitLogCorruptError."""
    record = decode_record(data, path)
    if not isinstance(record, CommitEntry):
        raise CommitLogCorruptError(f"commit log entry {path!r} is a fence written by run "
                                    f"{record.run_id} (epoch {record.epoch}), not an entry")
    return record


def decode_record(data: bytes, path: str) -> CommitEntry | Fence:
    """What a name under commits/ holds: a commit entry or a fence."""
    return RECORD.decode_as(data, path, lambda magic, body: (
        Fence.from_dict(body) if magic == FENCE_MAGIC else CommitEntry.from_dict(body)))
