"""Release markers: which local instance directories another process may take over as they are.

A process that lets go of a store (its idle copy was asked for, or its provider closes) flushes
RocksDB and then writes `released.json` into the instance directory, recording the
StoreCommit the files hold. The next process of the host that loads exactly that
(version, unique id) opens the directory instead of restoring from remote storage. It deletes
the marker before it opens the DB for writing, so a crash halfway through a transaction can
never leave a directory that claims a version it no longer holds. The marker is JSON with a
format version and a SHA-256 of its content; anything unreadable means "not reusable".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import uuid
from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.lineage.store_commit import StoreCommit

log = logging.getLogger(__name__)
MARKER_NAME = "released.json"
MARKER_FORMAT_VERSION = 1


def _digest(info: dict[str, Any]) -> str:
    canonical = json.dumps(info, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write_marker(instance_dir: str, info: StoreCommit) -> None:
    """Atomically (temp file, fsync, rename, fsync of the directory) record `info`."""
    body = info.to_dict()
    text = json.dumps({"format_version": MARKER_FORMAT_VERSION, "sha256": _digest(body),
                       "info": body}, sort_keys=True)
    target = os.path.join(instance_dir, MARKER_NAME)
    temp = os.path.join(instance_dir, f".{MARKER_NAME}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _sync_dir(instance_dir)


def read_marker(instance_dir: str) -> StoreCommit | None:
    """The info a released directory holds; None when there is no valid marker (a corrupt
    one is logged: the directory is then restored over, never reused)."""
    path = os.path.join(instance_dir, MARKER_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("release marker %r is unreadable, not reusing its directory: %s", path, exc)
        return None
    try:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("format_version") != MARKER_FORMAT_VERSION:
            raise ValueError(f"unsupported format version {data.get('format_version')!r}")
        body = data.get("info")
        if not isinstance(body, dict) or data.get("sha256") != _digest(body):
            raise ValueError("checksum mismatch")
        return StoreCommit.from_dict(body)
    except (ValueError, BackendError) as exc:
        log.warning("release marker %r is invalid, not reusing its directory: %s", path, exc)
        return None


def remove_marker(instance_dir: str) -> None:
    """Take the claim back (before the DB is opened for writing); durable on return."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(instance_dir, MARKER_NAME))
    _sync_dir(instance_dir)


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


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
