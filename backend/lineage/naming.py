"""Store ids, unique ids and the names of checkpoint files; the only place that knows them.

A store id is f"{operator}/{partition}" and its files live under f"state/{operator}/{partition}".
Changelog files are f"{version}_{unique_id}.changelog" (later files of the same commit
f"{version}_{unique_id}.{n}.changelog"), snapshot manifests f"{version}_{unique_id}.snapshot".
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from pyspark_dstl.backend.backend_errors import StoreIdError
from pyspark_dstl.core.errors import excerpt

STATE_PREFIX = "state"
CHANGELOG_SUFFIX = ".changelog"
SNAPSHOT_SUFFIX = ".snapshot"
MAX_OPERATOR_BYTES = 128
"""An operator name is a directory name locally and in storage; with room for the rest of a
path under the 255 bytes most file systems allow per name."""
MAX_PARTITION = 2**32 - 1
"""A partition is the key group of its changelog entries (changelog-format.md)."""
_UNIQUE_ID = re.compile(r"^[0-9A-Za-z-]{1,64}$")
_CHECKPOINT_NAME = re.compile(
    r"^(?P<version>0|[1-9][0-9]*)_(?P<uid>[0-9A-Za-z-]{1,64})"
    r"(?:\.(?P<part>[1-9][0-9]*))?\.(?P<kind>changelog|snapshot)$"
)


def new_unique_id() -> str:
    """A fresh id for one load-for-writing; 32 hex characters, never reused."""
    return uuid.uuid4().hex


def check_operator(operator: str) -> str:
    """Reject operator names that could escape or alias a store directory."""
    if not isinstance(operator, str) or not operator:
        raise StoreIdError(f"operator name must be a non-empty string, got {excerpt(operator)}")
    if "/" in operator or "\\" in operator or operator in (".", "..") or ".." in operator:
        raise StoreIdError(f"operator name {excerpt(operator)} must not contain '/', '\\' or "
                           f"'..'")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in operator):
        raise StoreIdError(f"operator name {excerpt(operator)} contains a control character")
    size = len(operator.encode("utf-8", "surrogatepass"))
    if size > MAX_OPERATOR_BYTES:
        raise StoreIdError(f"operator name {excerpt(operator, 40)} is {size} bytes long in UTF-8; "
                           f"at most {MAX_OPERATOR_BYTES} are allowed (it names a directory)")
    return operator


def check_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) \
            or not 0 <= partition <= MAX_PARTITION:
        raise StoreIdError(f"partition must be an integer in 0..{MAX_PARTITION}, "
                           f"got {excerpt(partition)}")
    return partition


def check_unique_id(unique_id: str, what: str = "unique id") -> str:
    if not isinstance(unique_id, str) or not _UNIQUE_ID.match(unique_id):
        raise StoreIdError(f"{what} {excerpt(unique_id)} must be 1-64 characters of "
                           f"[0-9A-Za-z-]")
    return unique_id


def check_version(version: int, what: str = "version") -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise StoreIdError(f"{what} must be a non-negative integer, got {excerpt(version)}")
    return version


def make_store_id(operator: str, partition: int) -> str:
    return f"{check_operator(operator)}/{check_partition(partition)}"


def split_store_id(store_id: str) -> tuple[str, int]:
    """(operator, partition) of a store id; StoreIdError naming the id when malformed."""
    operator, sep, partition = str(store_id).rpartition("/")
    if not sep or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        raise StoreIdError(f"store id {excerpt(store_id)} is not '<operator>/<partition>'")
    try:
        check_operator(operator)
        check_partition(int(partition))
    except StoreIdError as exc:
        raise StoreIdError(f"store id {excerpt(store_id)}: {exc}") from exc
    return operator, int(partition)


def store_dir(store_id: str) -> str:
    """The store's directory relative to the checkpoint location."""
    operator, partition = split_store_id(store_id)
    return f"{STATE_PREFIX}/{operator}/{partition}"


def checkpoint_label(version: int, unique_id: str) -> str:
    return f"{check_version(version)}_{check_unique_id(unique_id)}"


def snapshot_path(store_id: str, version: int, unique_id: str) -> str:
    return f"{store_dir(store_id)}/{checkpoint_label(version, unique_id)}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True)
class CheckpointName:
    """What a changelog or manifest file name says about itself."""

    version: int
    unique_id: str
    kind: str  # "changelog" or "snapshot"
    part: int  # 0 for the first file of a commit, n for f"{label}.{n}.changelog"


def parse_checkpoint_name(name: str) -> CheckpointName | None:
    """Parse the last path component; None for files that are not changelogs or manifests."""
    match = _CHECKPOINT_NAME.match(name.rsplit("/", 1)[-1])
    if match is None:
        return None
    return CheckpointName(int(match["version"]), match["uid"], match["kind"],
                          int(match["part"] or 0))
