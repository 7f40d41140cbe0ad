"""Which engine owns a checkpoint location: this backend, or Spark's own operator.

A location moves between the two engines (docs/migration.md): in place from Spark
(`import-state X X`, or a query on the switch with `spark.dstl.query.sparkCheckpoint=migrate`)
and back to Spark into a new location (`export-state X Y`). Each move leaves two kinds of
marks, so that neither engine resumes a location the other one owns:

- move records, for this backend: create-only JSON files `<location>/moves/<n>` (n = 0, 1,
  ...), each a phase of one move (started, done). The newest decides: a move from Spark that
  is not done, or any move back to Spark, refuses a query of this backend on the location;
- a move marker, for Spark: an entry of Spark's offset log (`<location>/offsets/<n>`) whose
  first line is not a version line. Spark reads its newest offset log entry when a query
  starts and fails on it with MALFORMED_LOG_FILE, quoting that first line, which says where
  the state went. Spark's `statestore` and `state-metadata` readers read the entries of the
  batches they are asked for and are not disturbed by it.

A query starting here calls `check_location` before it writes anything: it also refuses a
location that holds Spark's own streaming checkpoint and no state of this backend, where it
would otherwise start from empty state and re-read its input (the first line gives the
command). Formats: docs/formats.md, "Move records and markers".
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    UploadFailedError,
)
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.spark.spark_errors import (
    LocationMovedError,
    MoveRecordError,
    SparkCheckpointHereError,
)

MOVES_PREFIX = "moves"
SPARK_OFFSETS = "offsets"
SPARK_COMMITS = "commits"
SPARK_METADATA = "metadata"
MARKER_PREFIX = "pyspark-dstl:"
"""The first line of a move marker; Spark's error quotes the whole line."""
TO_DSTL = "spark-to-dstl"  # in place: Spark's checkpoint becomes this backend's location
TO_SPARK = "dstl-to-spark"  # export-state: this backend's state goes to a Spark checkpoint
IMPORTED = "imported"  # import-state took a Spark checkpoint's state to another location
STARTED, DONE = "started", "done"
SETTING = "spark.dstl.query.sparkCheckpoint"
MIGRATE, REFUSE = "migrate", "refuse"
MAX_RECORD_BYTES = 64 * 1024
_RECORD = RecordKind("move record", ("DSTL-MOVE",), "record", 1, MoveRecordError,
                     max_bytes=MAX_RECORD_BYTES)
_NUMBER = re.compile(r"^(0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class MoveRecord:
    """One phase of one move. `batch_id`: the last batch of the engine the state left (Spark's
    last committed batch for TO_DSTL, this backend's for TO_SPARK); `spark_checkpoint`: the
    Spark checkpoint of the move (the location itself for an in-place move, the target of an
    export)."""

    kind: str
    phase: str
    batch_id: int
    spark_checkpoint: str
    details: Mapping[str, Any] = field(default_factory=dict)
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    sequence: int = -1  # n of `moves/<n>`; -1 until written

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "phase": self.phase, "batch_id": self.batch_id,
                "spark_checkpoint": self.spark_checkpoint, "details": dict(self.details),
                "created_ms": self.created_ms}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], sequence: int, path: str) -> MoveRecord:
        try:
            record = cls(str(data["kind"]), str(data["phase"]), int(data["batch_id"]),
                         str(data["spark_checkpoint"]), dict(data.get("details") or {}),
                         int(data["created_ms"]), sequence)
        except (KeyError, TypeError, ValueError) as exc:
            raise MoveRecordError(f"move record {path!r} is malformed: {exc}") from exc
        if record.kind not in (TO_DSTL, TO_SPARK, IMPORTED) or record.phase not in (STARTED,
                                                                                DONE):
            raise MoveRecordError(f"move record {path!r}: unknown move {record.kind!r} / "
                                  f"{record.phase!r} (written by a newer release?)")
        return record

    def describe(self) -> str:
        if self.kind == TO_DSTL:
            what = f"in-place move from Spark's operator after Spark's batch {self.batch_id}"
        elif self.kind == IMPORTED:
            what = (f"import-state from the Spark checkpoint {self.spark_checkpoint} after "
                    f"Spark's batch {self.batch_id}")
        else:
            what = (f"export-state to the Spark checkpoint {self.spark_checkpoint} after "
                    f"batch {self.batch_id}")
        return f"{what} ({self.phase})"


def read_moves(storage: RemoteFiles) -> list[MoveRecord]:
    """Every move record of the location, oldest first."""
    records = []
    for info in _list(storage, MOVES_PREFIX + "/"):
        name = info.path[len(MOVES_PREFIX) + 1:]
        if not _NUMBER.match(name):
            continue  # temp files and foreign names
        data = _get(storage, info.path)
        _, body = _RECORD.decode(data, info.path)
        records.append(MoveRecord.from_dict(body, int(name), info.path))
    return sorted(records, key=lambda record: record.sequence)


def write_move(storage: RemoteFiles, record: MoveRecord) -> MoveRecord:
    """Store `record` as the next `moves/<n>` (create-only); returns it with its number."""
    existing = read_moves(storage)
    sequence = existing[-1].sequence + 1 if existing else 0
    path = f"{MOVES_PREFIX}/{sequence}"
    try:
        storage.loop.run(storage.aput(path, _RECORD.encode(record.to_dict())))
    except (UploadFailedError, ChangelogError) as exc:
        raise MoveRecordError(f"cannot write move record {path!r}: {exc} (another move of "
                              f"this location running at the same time?)") from exc
    return MoveRecord(record.kind, record.phase, record.batch_id, record.spark_checkpoint,
                      record.details, record.created_ms, sequence)


# ---- Spark's logs at the location, and the marker in them -----------------------------------


@dataclass(frozen=True)
class SparkLogs:
    """Spark's own offset and commit logs at the top of a location (not the engine checkpoint
    of a query of this backend, which is elsewhere): the batch numbers of their entries, and
    the offset log entries that are move markers."""

    offsets: tuple[int, ...] = ()
    commits: tuple[int, ...] = ()
    markers: tuple[int, ...] = ()
    newest_marker: Mapping[str, Any] = field(default_factory=dict)  # its JSON line

    @property
    def present(self) -> bool:
        """A Spark streaming checkpoint: at least one batch in its offset log."""
        return bool(self.offsets)

    @property
    def last_committed(self) -> int | None:
        return max(self.commits) if self.commits else None


def spark_logs(storage: RemoteFiles) -> SparkLogs:
    """Spark's logs at the location; markers are told apart by their first line (only entries
    past the last commit are read: a marker is never below it)."""
    offsets = _numbered(storage, SPARK_OFFSETS)
    commits = _numbered(storage, SPARK_COMMITS)
    last = max(commits) if commits else -1
    found = {b: _get(storage, f"{SPARK_OFFSETS}/{b}") for b in offsets if b > last}
    markers = tuple(b for b, data in found.items() if is_marker(data))
    newest = marker_details(found[max(markers)]) if markers else {}
    return SparkLogs(tuple(b for b in offsets if b not in markers), commits, markers, newest)


def marker_details(data: bytes) -> dict[str, Any]:
    """The JSON line of a marker ({} when it has none or it does not parse)."""
    lines = data.decode("utf-8", "replace").splitlines()
    try:
        details = json.loads(lines[1]) if len(lines) > 1 else {}
    except ValueError:
        return {}
    return details if isinstance(details, dict) else {}


def is_marker(data: bytes) -> bool:
    return data.startswith(MARKER_PREFIX.encode())


def marker_bytes(first_line: str, details: Mapping[str, Any]) -> bytes:
    """A move marker: the line Spark will quote, then the details as one JSON line."""
    line = " ".join(first_line.split())
    return f"{MARKER_PREFIX} {line}\n{json.dumps(dict(details), sort_keys=True)}\n".encode()


def write_marker(storage: RemoteFiles, batch_id: int, data: bytes) -> str:
    """The marker as Spark's offset log entry `batch_id` (create-only; the same marker already
    there is fine: a repeated move after an interruption)."""
    path = f"{SPARK_OFFSETS}/{batch_id}"
    try:
        storage.loop.run(storage.aput(path, data))
    except UploadFailedError as exc:
        if isinstance(exc.__cause__, ObjectExistsError) and is_marker(_get(storage, path)):
            return path
        raise MoveRecordError(f"cannot write the move marker {path!r}: {exc}") from exc
    except ChangelogError as exc:
        raise MoveRecordError(f"cannot write the move marker {path!r}: {exc}") from exc
    return path


def write_query_id(storage: RemoteFiles) -> None:
    """Spark's `metadata` file (`{"id": <uuid>}`) at the location, unless one is there."""
    import uuid

    try:
        storage.loop.run(storage.aput(SPARK_METADATA, json.dumps(
            {"id": str(uuid.uuid4())}).encode()))
    except UploadFailedError as exc:
        if not isinstance(exc.__cause__, ObjectExistsError):
            raise MoveRecordError(f"cannot write {SPARK_METADATA!r}: {exc}") from exc
    except ChangelogError as exc:
        raise MoveRecordError(f"cannot write {SPARK_METADATA!r}: {exc}") from exc


# ---- who owns the location ----------------------------------------------------------------


@dataclass(frozen=True)
class LocationStatus:
    """What a location holds, as far as ownership goes."""

    moves: tuple[MoveRecord, ...]
    spark: SparkLogs
    has_state: bool  # this backend's commit log holds an entry

    @property
    def last_move(self) -> MoveRecord | None:
        return self.moves[-1] if self.moves else None

    @property
    def moved_to_spark(self) -> bool:
        return self.last_move is not None and self.last_move.kind == TO_SPARK

    @property
    def moving_in(self) -> bool:
        """An in-place move from Spark was started (a marker or a record) and is not done."""
        last = self.last_move
        if last is not None and last.kind == TO_DSTL:
            return last.phase == STARTED
        return (last is None and bool(self.spark.markers) and not self.has_state
                and self.imported_to is None)

    @property
    def imported_to(self) -> str | None:
        """The location import-state took this Spark checkpoint's state to (its marker)."""
        if self.moves or self.spark.newest_marker.get("move") != IMPORTED:
            return None
        return str(self.spark.newest_marker.get("location", "?"))

    @property
    def spark_only(self) -> bool:
        """Spark's own checkpoint and nothing of this backend: a start would begin empty."""
        return (self.spark.present and not self.has_state and not self.moves
                and not self.spark.markers)


def location_status(storage: RemoteFiles) -> LocationStatus:
    return LocationStatus(tuple(read_moves(storage)), spark_logs(storage),
                          CommitLog(storage).latest() is not None)


def check_location(storage: RemoteFiles, location: str, processor: str | None,
                   engine: str | None = None) -> None:
    """Refuse a query of this backend on a location it does not own (module docstring).
    `processor`: "module:Class" of the query's PySpark processor, for the commands shown;
    `engine`: the query's engine checkpoint (URL): when it is the location itself, Spark's
    logs there are the query's own."""
    status = location_status(storage)
    if engine is not None and engine.rstrip("/") == location.rstrip("/"):
        status = LocationStatus(status.moves, SparkLogs(), status.has_state)
    shown, hint = display_location(location), processor_hint(processor)
    last = status.last_move
    if status.moved_to_spark and last is not None:
        target = last.spark_checkpoint
        if last.phase == STARTED:
            raise LocationMovedError(
                f"checkpoint location {shown!r}: an export-state of its state to the Spark "
                f"checkpoint {target!r} (after batch {last.batch_id}) was interrupted; run it "
                f"again: python -m pyspark_dstl export-state {shown} {target} {hint}; until "
                f"it is done neither engine resumes this location")
        raise LocationMovedError(
            f"checkpoint location {shown!r} was moved back to Spark's operator by "
            f"export-state after batch {last.batch_id}: its state now lives in the Spark "
            f"checkpoint {target!r}; start the query without pyspark_dstl.install() on "
            f"checkpointLocation {target!r} (to come back: python -m pyspark_dstl "
            f"import-state {target} {target} {hint})")
    if status.imported_to is not None and not status.has_state:
        target = status.imported_to
        raise LocationMovedError(
            f"checkpoint location {shown!r} is a Spark checkpoint whose state import-state "
            f"took to {target!r} (after Spark's batch {max(status.spark.markers) - 1}): start "
            f"the query on checkpointLocation {display_location(target)!r}")
    if status.moving_in:
        batch = last.batch_id if last is not None else max(status.spark.markers) - 1
        raise LocationMovedError(
            f"checkpoint location {shown!r}: an in-place move of Spark's checkpoint (after "
            f"Spark's batch {batch}) was interrupted; finish it: python -m pyspark_dstl "
            f"import-state {shown} {shown} {hint} (or start the query on the switch with "
            f"{SETTING}={MIGRATE}); until it is done neither engine resumes this location")
    if status.spark_only:
        last_batch = status.spark.last_committed
        batches = ("no committed batch" if last_batch is None
                   else f"batches up to {last_batch} committed")
        raise SparkCheckpointHereError(
            f"checkpoint location {shown!r} holds Spark's own streaming checkpoint ({batches} "
            f"by Spark's operator) and no state of pyspark-dstl: starting here would begin "
            f"from empty state and read the input again. Move it in place first: "
            f"python -m pyspark_dstl import-state {shown} {shown} {hint} (on the switch, "
            f"{SETTING}={MIGRATE} does the same when the query starts), or import it into a "
            f"new location: python -m pyspark_dstl import-state {shown} <new location> {hint} "
            f"(docs/migration.md)")


def display_location(location: str) -> str:
    """A local file:// URL as the path a command takes; other URLs as they are."""
    from urllib.parse import unquote, urlparse

    if location.startswith("file://"):
        return unquote(urlparse(location).path)
    return location


def processor_hint(processor: str | None) -> str:
    return f"--processor {processor}" if processor else "--processor <module:Class>"


def processor_name(processor: Any) -> str | None:
    """"module:Class" of a processor instance when the class can be imported by name (a class
    defined in a script's __main__ cannot: the command then shows a placeholder)."""
    cls = type(processor)
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return None
    return f"{cls.__module__}:{cls.__qualname__}"


def _numbered(storage: RemoteFiles, directory: str) -> tuple[int, ...]:
    found = set()
    for info in _list(storage, directory + "/"):
        name = info.path[len(directory) + 1:]
        if _NUMBER.match(name):
            found.add(int(name))
    return tuple(sorted(found))


def _list(storage: RemoteFiles, prefix: str) -> list[Any]:
    try:
        return storage.loop.run(storage.alist(prefix))
    except ChangelogError as exc:
        raise MoveRecordError(f"cannot list {prefix!r} of the checkpoint location: "
                              f"{exc}") from exc


def _get(storage: RemoteFiles, path: str) -> bytes:
    try:
        return storage.loop.run(storage.aget(path))
    except ObjectNotFoundError as exc:
        raise MoveRecordError(f"{path!r} disappeared while it was read (another run moving "
                              f"the location?)") from exc
    except ChangelogError as exc:
        raise MoveRecordError(f"cannot read {path!r}: {exc}") from exc
