"""Store ids, unique ids and the names of checkpoint files; the only place that knows them.

A store id is f"{operator}/{partition}" and its files live under f"state/{operator}/{partition}".
Changelog files are f"{version}_{unique_id}.changelog" (later files of the same commit
f"{version}_{unique_id}.{n}.changelog"), snapshot manifests f"{version}_{unique_id}.snapshot".
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from pyspark_dstl.backend.errors import StoreIdError

STATE_PREFIX = "state"
CHANGELOG_SUFFIX = ".changelog"
SNAPSHOT_SUFFIX = ".snapshot"
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
        raise StoreIdError(f"operator name must be a non-empty string, got {operator!r}")
    if "/" in operator or "\\" in operator or operator in (".", "..") or ".." in operator:
        raise StoreIdError(f"operator name {operator!r} must not contain '/', '\\' or '..'")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in operator):
        raise StoreIdError(f"operator name {operator!r} contains a control character")
    return operator


def check_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise StoreIdError(f"partition must be a non-negative integer, got {partition!r}")
    return partition


def check_unique_id(unique_id: str, what: str = "unique id") -> str:
    if not isinstance(unique_id, str) or not _UNIQUE_ID.match(unique_id):
        raise StoreIdError(f"{what} {unique_id!r} must be 1-64 characters of [0-9A-Za-z-]")
    return unique_id


def check_version(version: int, what: str = "version") -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise StoreIdError(f"{what} must be a non-negative integer, got {version!r}")
    return version


def make_store_id(operator: str, partition: int) -> str:
    return f"{check_operator(operator)}/{check_partition(partition)}"


def split_store_id(store_id: str) -> tuple[str, int]:
    """(operator, partition) of a store id; StoreIdError naming the id when malformed."""
    operator, sep, partition = str(store_id).rpartition("/")
    if not sep or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        raise StoreIdError(f"store id {store_id!r} is not '<operator>/<partition>'")
    try:
        check_operator(operator)
    except StoreIdError as exc:
        raise StoreIdError(f"store id {store_id!r}: {exc}") from exc
    return operator, int(partition)


def store_dir(store_id: str) -> str:
    """The store's directory relative to the checkpoint root."""
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
