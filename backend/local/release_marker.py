"""Release markers: which local instance directories another process may take over as they are.

A process that lets go of a store (its idle copy was asked for, or its provider closes) flushes
RocksDB and then writes `released.json` into the instance directory, recording the
StoreCommit the files hold. The next process of the host that loads exactly that
(version, unique id) opens the directory instead of restoring from remote storage. It deletes
the marker before it opens the DB for writing, so a crash halfway through a transaction can
never leave a directory that claims a version it no longer holds. The marker is JSON with a
checksummed JSON record (core/checksummed_json.py); anything unreadable means "not reusable".
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.core.checksummed_json import RecordKind
from pyspark_dstl.core.local_files import sync_directory

log = logging.getLogger(__name__)
MARKER_NAME = "released.json"
MARKER_MAGIC = "DSTL-RELEASED"
MARKER_FORMAT_VERSION = 2  # version 1 (a bare SHA-256, no magic) is not read: restored over
MAX_MARKER_BYTES = 16 * 1024 * 1024
_MARKER = RecordKind("release marker", (MARKER_MAGIC,), "info", MARKER_FORMAT_VERSION,
                     CorruptCheckpointError, MAX_MARKER_BYTES)


def write_marker(instance_dir: str, info: StoreCommit) -> None:
    """Atomically (temp file, fsync, rename, fsync of the directory) record `info`."""
    data = _MARKER.encode(info.to_dict())
    target = os.path.join(instance_dir, MARKER_NAME)
    temp = os.path.join(instance_dir, f".{MARKER_NAME}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    sync_directory(instance_dir)


def read_marker(instance_dir: str) -> StoreCommit | None:
    """The info a released directory holds; None when there is no valid marker (a corrupt
    one is logged: the directory is then restored over, never reused)."""
    path = os.path.join(instance_dir, MARKER_NAME)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_MARKER_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("release marker %r is unreadable, not reusing its directory: %s", path, exc)
        return None
    try:
        return _MARKER.decode_as(data, path, lambda _, body: StoreCommit.from_dict(body))
    except CorruptCheckpointError as exc:
        log.warning("not reusing the directory of release marker %r: %s", path, exc)
        return None


def remove_marker(instance_dir: str) -> None:
    """Take the claim back (before the DB is opened for writing); durable on return."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(instance_dir, MARKER_NAME))
    sync_directory(instance_dir)


def find_released(store_dir: str, version: int,
                  unique_id: str) -> tuple[str, StoreCommit] | None:
    """The instance directory released at exactly (version, unique id), with its marker's info.

    Only call it while holding the store's directory lock.
    """
    try:
        names = sorted(os.listdir(store_dir))
    except FileNotFoundError:
        return None
    for name in names:
        instance_dir = os.path.join(store_dir, name)
        if not os.path.isfile(os.path.join(instance_dir, MARKER_NAME)):
            continue
        info = read_marker(instance_dir)
        if info is not None and (info.version, info.unique_id) == (version, unique_id):
            return instance_dir, info
    return None


def same_checkpoint(a: StoreCommit, b: StoreCommit) -> bool:
    """True when both describe the same state: version, id, snapshot, lineage and changelog
    (the base id and the snapshot in flight are reports, not state)."""
    return (a.store_id == b.store_id and a.version == b.version and a.unique_id == b.unique_id
            and a.lineage == b.lineage and a.changelog.to_dict() == b.changelog.to_dict()
            and (a.materialized.to_dict() if a.materialized else None)
            == (b.materialized.to_dict() if b.materialized else None))

