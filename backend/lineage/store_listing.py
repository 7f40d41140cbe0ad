"""What lies in a checkpoint location's store directories, sorted by kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_dstl.backend.backend_errors import StoreIdError
from pyspark_dstl.backend.lineage.naming import (
    STATE_PREFIX,
    CheckpointName,
    make_store_id,
    parse_checkpoint_name,
    store_dir,
)
from pyspark_dstl.changelog.storage.base import ObjectInfo
from pyspark_dstl.materializer.names import META_DIR, SST_DIR
from pyspark_dstl.materializer.remote import RemoteFiles


@dataclass
class StoreDirListing:
    """One store directory: changelogs and manifests by name, snapshot data files, the rest."""

    store_id: str
    changelogs: list[tuple[CheckpointName, ObjectInfo]] = field(default_factory=list)
    manifests: list[tuple[CheckpointName, ObjectInfo]] = field(default_factory=list)
    data_files: list[ObjectInfo] = field(default_factory=list)  # under sst/ and meta/
    other: list[ObjectInfo] = field(default_factory=list)

    @property
    def all_files(self) -> list[ObjectInfo]:
        return ([info for _, info in self.changelogs] + [info for _, info in self.manifests]
                + self.data_files + self.other)


def classify(store_id: str, infos: list[ObjectInfo]) -> StoreDirListing:
    prefix = store_dir(store_id) + "/"
    listing = StoreDirListing(store_id)
    for info in infos:
        relative = info.path[len(prefix):]
        if relative.startswith((SST_DIR + "/", META_DIR + "/")):
            listing.data_files.append(info)
            continue
        name = parse_checkpoint_name(relative) if "/" not in relative else None
        if name is None:
            listing.other.append(info)
        elif name.kind == "snapshot":
            listing.manifests.append((name, info))
        else:
            listing.changelogs.append((name, info))
    listing.changelogs.sort(key=lambda item: (item[0].version, item[0].unique_id, item[0].part))
    listing.manifests.sort(key=lambda item: (item[0].version, item[0].unique_id))
    return listing


def list_store_dir(storage: RemoteFiles, store_id: str) -> StoreDirListing:
    infos = storage.loop.run(storage.alist(store_dir(store_id) + "/"))
    return classify(store_id, infos)


def list_stores(storage: RemoteFiles) -> dict[str, StoreDirListing]:
    """Every store directory under state/, with its files (one listing of the whole tree)."""
    by_store: dict[str, list[ObjectInfo]] = {}
    for info in storage.loop.run(storage.alist(STATE_PREFIX + "/")):
        parts = info.path.split("/")
        if len(parts) < 4:
            continue
        try:
            store_id = make_store_id(parts[1], int(parts[2]))
        except (ValueError, StoreIdError):
            continue  # not a store directory of ours
        by_store.setdefault(store_id, []).append(info)
    return {store_id: classify(store_id, infos) for store_id, infos in sorted(by_store.items())}
