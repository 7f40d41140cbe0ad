"""Finding a version's history from the store's own files (V2's self-contained directory).

Given only (version, unique id): use f"{v}_{id}.snapshot" if it exists; otherwise read the
header of the newest f"{v}_{id}[.n].changelog", which names the snapshot it was built on and
the lineage since; if that snapshot is missing, trace back through the header of the
snapshot's own changelog files, until a snapshot that exists or version 0. Files of other
unique ids are never looked at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, LineageError
from pyspark_dstl.backend.lineage.completion import require_checkpoint, status_from_header
from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.rules import HeaderMeta
from pyspark_dstl.backend.lineage.store_listing import list_store_dir
from pyspark_dstl.changelog.changelog_errors import ChangelogError, FormatError
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.files import read_file_header


@dataclass
class StoreFiles:
    """A store directory's changelog and manifest files, by (version, unique id)."""

    changelogs: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    snapshots: dict[tuple[int, str], str] = field(default_factory=dict)

    @classmethod
    def scan(cls, storage: ChangelogService, store_id: str) -> StoreFiles:
        listing = list_store_dir(storage, store_id)
        files = cls()
        for name, info in listing.changelogs:  # sorted by part within one commit
            files.changelogs.setdefault((name.version, name.unique_id), []).append(info.path)
        for name, info in listing.manifests:
            files.snapshots[(name.version, name.unique_id)] = info.path
        return files

    def changelog_paths(self, version: int, unique_id: str) -> list[str]:
        return self.changelogs.get((version, unique_id), [])


@dataclass(frozen=True)
class ReplayPlan:
    """Restore `snapshot` (or start empty at version 0), then replay `steps` in order."""

    snapshot: tuple[int, str, str] | None  # version, unique id, manifest path
    steps: tuple[tuple[int, str, tuple[str, ...]], ...]  # version, unique id, changelog paths

    @property
    def base(self) -> tuple[int, str | None]:
        return (self.snapshot[0], self.snapshot[1]) if self.snapshot else (0, None)


def read_header(storage: ChangelogService, store_id: str, path: str) -> HeaderMeta:
    """The commit header of one changelog file (reads only its first bytes when it can)."""
    try:
        header = read_file_header(storage, path)
    except FormatError as exc:
        raise CorruptCheckpointError(f"store {store_id!r}: changelog file {path!r} has an "
                                     f"unreadable header: {exc}") from exc
    except ChangelogError as exc:
        raise LineageError(f"store {store_id!r}: cannot read changelog file {path!r}: "
                           f"{exc}") from exc
    for log in header.logs:
        if log.log_id == store_id:
            return HeaderMeta.from_dict(log.metadata, path)
    raise CorruptCheckpointError(f"store {store_id!r}: changelog file {path!r} holds no log "
                                 f"of this store (logs: {[log.log_id for log in header.logs]})")


def plan_replay(storage: ChangelogService, store_id: str, version: int,
                unique_id: str) -> ReplayPlan:
    files = StoreFiles.scan(storage, store_id)
    target = (version, unique_id)
    if target in files.snapshots:
        return ReplayPlan((version, unique_id, files.snapshots[target]), ())
    steps: list[tuple[int, str, tuple[str, ...]]] = []  # newest first
    current: tuple[int, str] = target
    needed_by = "the requested load"
    while True:
        paths = files.changelog_paths(*current)
        if not paths:
            raise LineageError(f"store {store_id!r}: version {current[0]} id {current[1]!r} "
                               f"(needed by {needed_by}) has neither a snapshot nor changelog "
                               f"files under {store_dir(store_id)!r}")
        header = read_header(storage, store_id, paths[-1])
        if (header.store_id, header.version, header.unique_id) != (store_id, *current):
            raise LineageError(f"store {store_id!r}: changelog file {paths[-1]!r} describes "
                               f"store {header.store_id!r} version {header.version} id "
                               f"{header.unique_id!r}, not version {current[0]} id "
                               f"{current[1]!r}")
        require_checkpoint(store_id, *current, status_from_header(header, paths[-1]))
        steps.append((current[0], current[1], tuple(paths)))
        for lineage_version, lineage_id in reversed(header.lineage):
            lineage_paths = files.changelog_paths(lineage_version, lineage_id)
            if not lineage_paths:
                raise LineageError(
                    f"store {store_id!r}: version {lineage_version} id {lineage_id!r}, in the "
                    f"lineage of {paths[-1]!r}, has no changelog file")
            steps.append((lineage_version, lineage_id, tuple(lineage_paths)))
        snapshot = header.snapshot
        if snapshot is None:
            return ReplayPlan(None, tuple(reversed(steps)))
        key = (snapshot.version, snapshot.unique_id)
        if key in files.snapshots:
            return ReplayPlan((*key, files.snapshots[key]), tuple(reversed(steps)))
        # the presumed snapshot is gone: its own changelog header continues the history
        needed_by = f"{paths[-1]!r} as its snapshot"
        current = key
