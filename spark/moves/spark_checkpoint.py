"""A stopped Spark query's own checkpoint, read as plain files: which batch it last committed,
that batch's offset log metadata (time, watermark, the session settings Spark pinned) and its
commit log metadata, and the copy of its engine logs that a query of this backend goes on from.

Spark writes its logs as text files: `offsets/<batchId>` is a version line ("v1"), one JSON
line of metadata (`batchWatermarkMs`, `batchTimestampMs`, `conf`) and one line per source (its
offset as JSON, "-" for none); `commits/<batchId>` is a version line and one JSON line
(`nextBatchWatermarkMs`). A batch is complete once both exist. Hadoop's local file system puts a
`.<name>.crc` checksum beside every file; Spark reads a file without one just as well. An offset
log entry past the last commit whose first line is a move marker (driver/ownership.py) is not a
batch: it is skipped here and never copied.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark_dstl.spark.driver.ownership import MARKER_PREFIX
from pyspark_dstl.spark.spark_errors import MoveError

OFFSETS = "offsets"
COMMITS = "commits"
SOURCES = "sources"
METADATA = "metadata"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class ImportStateError(MoveError):
    """Root of the errors of import-state; the first line names the culprit and the fix."""


class SparkCheckpointError(ImportStateError):
    """The Spark checkpoint is missing, not local, or a log file of it cannot be read."""


class IncompleteSparkCheckpointError(ImportStateError):
    """The Spark checkpoint's last batch has an offset log entry but no commit: the query was
    not stopped cleanly (or still runs)."""


class NoTransformWithStateError(ImportStateError):
    """The Spark checkpoint has no transformWithState operator whose state could be read."""


class ChainImportError(ImportStateError):
    """A step the Spark query chains after its transformWithState cannot be imported: its
    state has no exact counterpart here, or it is not the step the query given has there."""


class TargetNotEmptyError(ImportStateError):
    """The target checkpoint already holds state (or an engine checkpoint)."""


class ProcessorMismatchError(ImportStateError):
    """The processor does not declare the state variables the Spark query kept."""


def local_path(location: str, what: str,
               fix: str = "copy it to a local directory first") -> Path:
    """A local directory from a path or a file:// URL; other schemes are refused."""
    if "://" not in location:
        return Path(os.path.abspath(os.path.expanduser(location)))
    parsed = urlparse(location)
    if parsed.scheme != "file":
        raise SparkCheckpointError(
            f"{what} {location!r}: import-state works on local checkpoints only (a path or a "
            f"file:// URL); {fix}")
    return Path(unquote(parsed.path))


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def _is_marker(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(len(MARKER_PREFIX)) == MARKER_PREFIX.encode()
    except OSError:
        return False


def _log_lines(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SparkCheckpointError(f"Spark checkpoint file {str(path)!r} cannot be read: "
                                   f"{exc}; is the checkpoint complete?") from exc
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise SparkCheckpointError(f"Spark checkpoint file {str(path)!r} is not a Spark log "
                                   f"entry (expected a version line and a JSON line)")
    return lines


def _json_line(path: Path, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise SparkCheckpointError(f"Spark checkpoint file {str(path)!r}: its metadata line "
                                   f"is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SparkCheckpointError(f"Spark checkpoint file {str(path)!r}: its metadata line "
                                   f"is not a JSON object")
    return value


@dataclass(frozen=True)
class BatchLogs:
    """What Spark's logs say about one committed batch."""

    batch_id: int
    timestamp_ms: int  # batchTimestampMs: the batch's processing time
    watermark_ms: int  # batchWatermarkMs: the watermark the batch ran with
    next_watermark_ms: int  # nextBatchWatermarkMs of its commit: the next batch's watermark
    conf: dict[str, str] = field(default_factory=dict)
    previous_watermark_ms: int | None = None  # the batch before's, if its entry exists

    @property
    def shuffle_partitions(self) -> int | None:
        value = self.conf.get(SHUFFLE_PARTITIONS)
        return None if value is None else int(value)


@dataclass(frozen=True)
class SparkCheckpoint:
    """A Spark query's checkpoint directory."""

    root: Path

    @classmethod
    def open(cls, location: str) -> SparkCheckpoint:
        root = local_path(location, "Spark checkpoint")
        if not root.is_dir():
            raise SparkCheckpointError(f"Spark checkpoint {str(root)!r} does not exist or is "
                                       f"not a directory: give the checkpointLocation of the "
                                       f"stopped query")
        if not (root / OFFSETS).is_dir():
            raise SparkCheckpointError(f"Spark checkpoint {str(root)!r} has no {OFFSETS}/ "
                                       f"directory: it is not a streaming query's checkpoint "
                                       f"(or the query never ran a batch)")
        return cls(root)

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def last_committed(self) -> BatchLogs:
        """The last batch, which must be committed: a query stopped between its offset log
        entry and its commit would run that batch again, with state this import cannot
        see."""
        offsets = self.batches()
        commits = set(_batch_ids(self.root / COMMITS))
        if not offsets:
            raise IncompleteSparkCheckpointError(
                f"Spark checkpoint {str(self.root)!r} has no batch in {OFFSETS}/: run the query "
                f"until it commits a batch, then stop it and import")
        last = offsets[-1]
        if last not in commits:
            raise IncompleteSparkCheckpointError(
                f"Spark checkpoint {str(self.root)!r}: batch {last} is in {OFFSETS}/ but not in "
                f"{COMMITS}/, so the query did not stop after a complete batch (or still "
                f"runs): restart it on PySpark until it commits, stop it, then import")
        return self.batch(last)

    def batches(self) -> list[int]:
        """The offset log's batches, move markers (past the last commit) left out."""
        offsets = _batch_ids(self.root / OFFSETS)
        committed = max(_batch_ids(self.root / COMMITS), default=-1)
        return [b for b in offsets
                if b <= committed or not _is_marker(self.root / OFFSETS / str(b))]

    def batch(self, batch_id: int) -> BatchLogs:
        offsets_path = self.root / OFFSETS / str(batch_id)
        meta = _json_line(offsets_path, _log_lines(offsets_path)[1])
        commit_path = self.root / COMMITS / str(batch_id)
        commit = _json_line(commit_path, _log_lines(commit_path)[1])
        previous = None
        before = self.root / OFFSETS / str(batch_id - 1)
        if before.is_file():
            previous = int(_json_line(before, _log_lines(before)[1]).get("batchWatermarkMs", 0))
        conf = {str(k): str(v) for k, v in dict(meta.get("conf") or {}).items()}
        return BatchLogs(batch_id=batch_id,
                         timestamp_ms=int(meta.get("batchTimestampMs", 0)),
                         watermark_ms=int(meta.get("batchWatermarkMs", 0)),
                         next_watermark_ms=int(commit.get("nextBatchWatermarkMs", 0)),
                         conf=conf, previous_watermark_ms=previous)


def engine_is_empty(engine: Path) -> bool:
    return not engine.exists() or (engine.is_dir() and not any(engine.iterdir()))


def copy_engine_logs(source: SparkCheckpoint, target: Path,
                     extra_source_offsets: Sequence[str] = ()) -> list[str]:
    """Copy `metadata`, `offsets/`, `commits/` and `sources/` (never `state/`) into `target`,
    which must not exist; the files copied, relative to the checkpoint.

    `extra_source_offsets`: one offset line per source the new query reads in addition to the
    old query's (the tick source of a query with a time mode); Spark refuses an offset log
    entry with fewer offsets than the query has sources, so each copied entry gets them
    appended, and loses its Hadoop checksum file, which no longer matches."""
    staging = target.with_name(f".{target.name}.importing")
    if staging.exists():
        shutil.rmtree(staging)
    copied: list[str] = []
    for name in (METADATA, OFFSETS, COMMITS, SOURCES):
        path = source.root / name
        if path.is_file():
            staging.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, staging / name)
            crc = source.root / f".{name}.crc"
            if crc.is_file():
                shutil.copy2(crc, staging / crc.name)
            copied.append(name)
        elif path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                relative = file.relative_to(source.root)
                if name == OFFSETS and _is_marker(file):
                    continue  # a move marker is not Spark's entry: the query here has none
                destination = staging / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                if name == OFFSETS and extra_source_offsets:
                    if not file.name.isdigit():
                        continue  # checksums and temporary files: not valid once rewritten
                    lines = _log_lines(file)
                    destination.write_text("\n".join([*lines, *extra_source_offsets]),
                                           encoding="utf-8")
                else:
                    shutil.copy2(file, destination)
                copied.append(str(relative))
    if METADATA not in copied:
        raise SparkCheckpointError(f"Spark checkpoint {str(source.root)!r} has no {METADATA} "
                                   f"file (the query id): is it a streaming checkpoint?")
    staging.rename(target)
    return copied
