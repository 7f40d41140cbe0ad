"""One commit log entry: the CheckpointInfo of every store of every operator at a batch.

Stored as JSON with a magic string, a format version and a SHA-256 of the canonical body, so
a damaged entry is reported with its path instead of being half-read.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.errors import BackendError, CommitLogCorruptError, CommitLogError
from pyspark_dstl.backend.lineage.checkpoint import CheckpointInfo
from pyspark_dstl.backend.lineage.naming import make_store_id

MAGIC = "DSTL-COMMIT"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class OperatorCommit:
    """One stateful operator's stores at a batch: partition -> CheckpointInfo."""

    num_partitions: int
    stores: Mapping[int, CheckpointInfo]


@dataclass(frozen=True)
class CommitEntry:
    batch_id: int
    operators: Mapping[str, OperatorCommit]
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    extra: Mapping[str, Any] = field(default_factory=dict)

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

    def infos(self) -> Iterator[CheckpointInfo]:
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
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommitEntry:
        operators = {
            str(op): OperatorCommit(
                num_partitions=int(c["num_partitions"]),
                stores={int(p): CheckpointInfo.from_dict(info)
                        for p, info in c["stores"].items()},
            )
            for op, c in data["operators"].items()
        }
        return cls(int(data["batch_id"]), operators, int(data["created_ms"]),
                   dict(data.get("extra", {})))


def encode_entry(entry: CommitEntry) -> bytes:
    body = entry.to_dict()
    document = {"magic": MAGIC, "format_version": FORMAT_VERSION,
                "checksum": _checksum(body), "entry": body}
    return json.dumps(document, sort_keys=True, indent=1).encode()


def decode_entry(data: bytes, path: str) -> CommitEntry:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CommitLogCorruptError(f"commit log entry {path!r} is not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("magic") != MAGIC:
        raise CommitLogCorruptError(f"commit log entry {path!r} lacks magic {MAGIC!r}")
    if document.get("format_version") != FORMAT_VERSION:
        raise CommitLogCorruptError(f"commit log entry {path!r} has unsupported format "
                                    f"version {document.get('format_version')!r} (this "
                                    f"library reads {FORMAT_VERSION})")
    body = document.get("entry")
    if not isinstance(body, dict) or document.get("checksum") != _checksum(body):
        raise CommitLogCorruptError(f"commit log entry {path!r} fails its checksum")
    try:
        return CommitEntry.from_dict(body)
    except (BackendError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CommitLogCorruptError(f"commit log entry {path!r} is malformed: {exc!r}") from exc


def _checksum(body: Mapping[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
