"""Names of snapshot files, remote and local, and the checks that keep them unambiguous."""

from __future__ import annotations

import hashlib
import re
import uuid

from pyspark_dstl.changelog.changelog_errors import StorageError
from pyspark_dstl.changelog.storage.base import check_key, join_key
from pyspark_dstl.materializer.materializer_errors import SnapshotRequestError

MANIFEST_SUFFIX = ".snapshot"
SST_DIR = "sst"
META_DIR = "meta"
# files RocksDB never changes after writing them: safe to hard-link out of a shared cache
IMMUTABLE_SUFFIXES = (".sst", ".blob")

_UNIQUE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MANIFEST_NAME = re.compile(r"^(\d+)_([A-Za-z0-9][A-Za-z0-9._-]{0,127})\.snapshot$")
_LOCAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def check_unique_id(unique_id: str) -> str:
    """Unique ids go into file names; the version before the first '_' keeps names unambiguous."""
    if not isinstance(unique_id, str) or not _UNIQUE_ID.match(unique_id):
        raise SnapshotRequestError(
            f"invalid unique id {unique_id!r}: use 1-128 letters, digits, '.', '_' or '-'")
    return unique_id


def check_remote_dir(remote_dir: str) -> str:
    """A storage key prefix without surrounding slashes, e.g. 'state/op/3'."""
    cleaned = remote_dir.strip("/") if isinstance(remote_dir, str) else ""
    try:
        return check_key(cleaned)
    except StorageError as exc:
        raise SnapshotRequestError(f"invalid remote directory {remote_dir!r}") from exc


def check_local_name(name: str) -> bool:
    """True for a plain RocksDB file name (no separators, no '..')."""
    return bool(_LOCAL_NAME.match(name))


def manifest_name(version: int, unique_id: str) -> str:
    return f"{version}_{unique_id}{MANIFEST_SUFFIX}"


def manifest_path(remote_dir: str, version: int, unique_id: str) -> str:
    return join_key(remote_dir, manifest_name(version, unique_id))


def parse_manifest_name(name: str) -> tuple[int, str] | None:
    """(version, unique_id) of a manifest file name, None for any other name."""
    match = _MANIFEST_NAME.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def remote_file_path(remote_dir: str, local_name: str, version: int) -> str:
    """A fresh, never-reused key for one uploaded file: SSTs under sst/, the rest under meta/.

    The name starts with the version of the snapshot that first uploaded it, so cleanup can
    tell a file an in-flight snapshot may still reference (version at or above the oldest
    retained one) from an orphan, without asking anybody.
    """
    tag = uuid.uuid4().hex
    if local_name.endswith(".sst"):
        return join_key(remote_dir, SST_DIR, f"{version}_{local_name[:-4]}-{tag}.sst")
    return join_key(remote_dir, META_DIR, f"{version}_{local_name}-{tag}")


_UPLOADED_NAME = re.compile(r"^(\d+)_[A-Za-z0-9._-]+-[0-9a-f]{32}(\.sst)?$")


def parse_uploaded_version(name: str) -> int | None:
    """The snapshot version in an uploaded SST/meta file name, None for other names."""
    match = _UPLOADED_NAME.match(name)
    return int(match.group(1)) if match else None


def is_immutable(local_name: str) -> bool:
    return local_name.endswith(IMMUTABLE_SUFFIXES)


def local_dir_name(text: str) -> str:
    """A readable, collision-free directory name for any store id or key."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    readable = _UNSAFE.sub("_", text).strip("._-")[:48]
    return f"{readable}-{digest}" if readable else digest
