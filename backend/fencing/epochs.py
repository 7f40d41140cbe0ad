"""Epoch files: which run holds a checkpoint location, all of them created once and never changed.

```
<location>/epochs/<e>        epoch e: the run that took the location (JSON, below)
<location>/epochs/<e>.<k>    the k-th renewal of epoch e's lease (k = 1, 2, ...)
<location>/epochs/<e>.end    epoch e ended: its run let go and writes nothing more
```

The newest epoch (the highest e with an epoch file) holds the location. Each file is written with
the storage's create-only put, so two runs can never both take epoch e. Every file is a JSON
document with a magic, a format version and a SHA-256 of its body, like commit log entries.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.fencing.process import ProcessIdentity
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.core.errors import excerpt

EPOCHS_PREFIX = "epochs"
FORMAT_VERSION = 1
EPOCH_MAGIC = "DSTL-EPOCH"
RENEWAL_MAGIC = "DSTL-RENEWAL"
END_MAGIC = "DSTL-END"
_NAME = re.compile(r"^(0|[1-9][0-9]*)(?:\.(?:([1-9][0-9]*)|(end)))?$")


def epoch_path(epoch: int) -> str:
    return f"{EPOCHS_PREFIX}/{epoch}"


def renewal_path(epoch: int, renewal: int) -> str:
    return f"{EPOCHS_PREFIX}/{epoch}.{renewal}"


def end_path(epoch: int) -> str:
    return f"{EPOCHS_PREFIX}/{epoch}.end"


@dataclass(frozen=True)
class EpochRecord:
    """Who took epoch `epoch`: the run, its process, its lease, and whom it took over from."""

    epoch: int
    run_id: str
    process: ProcessIdentity
    lease_seconds: float
    purpose: str = "run"  # "run", "cleanup" (the tool) or "takeover" (the tool)
    took_over: tuple[int, str] | None = None  # (epoch, run id) fenced by this one
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def describe(self) -> str:
        return (f"run {self.run_id} (epoch {self.epoch}, {self.purpose}, "
                f"{self.process.describe()})")

    def to_body(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "run_id": self.run_id, "process": self.process.to_dict(),
                "lease_ms": round(self.lease_seconds * 1000), "purpose": self.purpose,
                "took_over": list(self.took_over) if self.took_over else None,
                "created_ms": self.created_ms}

    @classmethod
    def from_body(cls, body: Mapping[str, Any], path: str) -> EpochRecord:
        took_over = body.get("took_over")
        record = cls(_int(body["epoch"]), str(body["run_id"]),
                     ProcessIdentity.from_dict(body["process"]),
                     _int(body["lease_ms"]) / 1000, str(body["purpose"]),
                     (_int(took_over[0]), str(took_over[1])) if took_over else None,
                     _int(body["created_ms"]))
        if epoch_path(record.epoch) != path:
            raise CorruptCheckpointError(f"epoch file {path!r} describes epoch {record.epoch}")
        return record


def encode(magic: str, body: Mapping[str, Any]) -> bytes:
    return _kind(magic).encode(body)


def decode_epoch(data: bytes, path: str) -> EpochRecord:
    """The epoch record at `path`; CorruptCheckpointError naming it when it is not one."""
    return _kind(EPOCH_MAGIC).decode_as(data, path,
                                        lambda _, body: EpochRecord.from_body(body, path))


def _kind(magic: str) -> RecordKind:
    return RecordKind("epoch file", (magic,), "body", FORMAT_VERSION, CorruptCheckpointError)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {excerpt(value)}")
    return value


@dataclass
class EpochFiles:
    """What the listing shows of one epoch."""

    epoch: int
    has_record: bool = False
    renewals: int = 0  # the highest renewal number
    ended: bool = False
    paths: list[str] = field(default_factory=list)

    @property
    def progress(self) -> tuple[int, bool]:
        """Changes when the holder renews or lets go: what an observer watches."""
        return self.renewals, self.ended


@dataclass
class EpochTable:
    """Every epoch the listing of `epochs/` shows; names that are not ours are ignored."""

    epochs: dict[int, EpochFiles] = field(default_factory=dict)

    @classmethod
    def from_listing(cls, infos: list[ObjectInfo]) -> EpochTable:
        table = cls()
        for info in infos:
            match = _NAME.match(info.path[len(EPOCHS_PREFIX) + 1:])
            if match is None:
                continue
            files = table.epochs.setdefault(int(match[1]), EpochFiles(int(match[1])))
            files.paths.append(info.path)
            if match[2]:
                files.renewals = max(files.renewals, int(match[2]))
            elif match[3]:
                files.ended = True
            else:
                files.has_record = True
        return table

    @property
    def newest(self) -> EpochFiles | None:
        """The epoch that holds the location: the highest one with its epoch file."""
        taken = [files for files in self.epochs.values() if files.has_record]
        return max(taken, key=lambda files: files.epoch, default=None)
