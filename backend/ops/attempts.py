"""The attempts of a store directory and whether each completed its commit, for the tools.

An attempt is one (version, unique id): its changelog files `<v>_<id>[.<n>].changelog`. Its
newest file's header tells whether its commit completed (completion.py); `verify` also checks
that its files hold every change set the completion mark names.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.lineage.completion import AttemptStatus, status_from_header
from pyspark_dstl.backend.lineage.rules import HeaderMeta
from pyspark_dstl.backend.lineage.store_listing import StoreDirListing
from pyspark_dstl.changelog.changelog_errors import ChangelogError
from pyspark_dstl.changelog.files import FileHeader, read_file_header
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.remote import RemoteFiles

AttemptKey = tuple[int, str]


@dataclass
class Attempt:
    version: int
    unique_id: str
    files: list[ObjectInfo]  # by part: the first upload first

    @property
    def label(self) -> str:
        return f"{self.version}_{self.unique_id}"

    @property
    def newest(self) -> ObjectInfo:
        return self.files[-1]


def attempts_of(listing: StoreDirListing) -> dict[AttemptKey, Attempt]:
    """Every attempt with changelog files in the listing, oldest version first."""
    found: dict[AttemptKey, Attempt] = {}
    for name, info in listing.changelogs:  # sorted by version, id, part
        key = (name.version, name.unique_id)
        found.setdefault(key, Attempt(name.version, name.unique_id, [])).files.append(info)
    return found


@dataclass(frozen=True)
class NewestHeader:
    """The newest file's header of an attempt: who wrote it when, and what it says."""

    file: FileHeader
    meta: HeaderMeta
    status: AttemptStatus


def read_newest_header(storage: RemoteFiles, store_id: str, attempt: Attempt) -> NewestHeader:
    """One ranged read (the whole file when its header is larger than the probe)."""
    path = attempt.newest.path
    try:
        header = read_file_header(StorageSource(storage), path)
    except ChangelogError as exc:
        raise BackendError(f"store {store_id!r}: cannot read the header of {path!r}: "
                           f"{exc}") from exc
    metadata = next((log.metadata for log in header.logs if log.log_id == store_id), None)
    if metadata is None:
        raise BackendError(f"store {store_id!r}: changelog file {path!r} holds no log of "
                           f"this store")
    meta = HeaderMeta.from_dict(metadata, path)
    return NewestHeader(header, meta, status_from_header(meta, path))


class StorageSource:
    """Ranged reads through the storage's loop, for changelog.files."""

    def __init__(self, storage: RemoteFiles) -> None:
        self._storage = storage

    def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        return self._storage.loop.run(self._storage.aget(path, start, end))
