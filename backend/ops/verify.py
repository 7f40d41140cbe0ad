"""`verify`: read every file of a checkpoint root and check it; one line per problem."""

from __future__ import annotations

from pyspark_dstl.backend.errors import BackendError
from pyspark_dstl.backend.lineage.commit_log import CommitLog, decode_entry
from pyspark_dstl.backend.lineage.listing import StoreDirListing, list_stores
from pyspark_dstl.backend.lineage.rules import HeaderMeta
from pyspark_dstl.changelog.errors import ChangelogError
from pyspark_dstl.changelog.files import verify_file
from pyspark_dstl.materializer.checksum import crc32_of
from pyspark_dstl.materializer.errors import MaterializerError
from pyspark_dstl.materializer.listing import aread_manifest
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.remote import RemoteFiles


def verify_checkpoint(storage: RemoteFiles) -> list[str]:
    """Problems found: unreadable or altered files, missing references. Empty when sound."""
    listings = list_stores(storage)
    present = {info.path for listing in listings.values() for info in listing.all_files}
    problems = _verify_commit_log(storage, present)
    for listing in listings.values():
        problems += _verify_store(storage, listing)
    return problems


def _get(storage: RemoteFiles, path: str) -> bytes:
    return storage.loop.run(storage.aget(path))


def _verify_commit_log(storage: RemoteFiles, present: set[str]) -> list[str]:
    """Every entry decodes; the newest one names only files that exist."""
    problems: list[str] = []
    latest_paths: set[str] = set()
    generations = CommitLog(storage).generations()
    newest = max(generations, default=None)
    for batch_id, gens in generations.items():
        for generation, info in gens:
            try:
                entry = decode_entry(_get(storage, info.path), info.path)
            except (BackendError, ChangelogError) as exc:
                problems.append(f"commit log {info.path}: {exc}")
                continue
            if entry.batch_id != batch_id:
                problems.append(f"commit log {info.path}: holds batch {entry.batch_id}")
            if batch_id == newest and generation == gens[-1][0]:
                for checkpoint in entry.infos():
                    latest_paths.update(checkpoint.changelog.paths)
                    if checkpoint.materialized is not None:
                        latest_paths.add(checkpoint.materialized.manifest_path)
    problems += [f"latest commit references missing file {path}"
                 for path in sorted(latest_paths - present)]
    return problems


def _verify_store(storage: RemoteFiles, listing: StoreDirListing) -> list[str]:
    problems: list[str] = []
    for name, info in listing.changelogs:
        try:
            data = _get(storage, info.path)
            summary = verify_file(data, info.path)
            logs = {log.log_id: log for log in summary.header.logs}
            if listing.store_id not in logs:
                problems.append(f"changelog {info.path}: no log of store {listing.store_id}")
                continue
            meta = HeaderMeta.from_dict(logs[listing.store_id].metadata, info.path)
            if (meta.version, meta.unique_id) != (name.version, name.unique_id):
                problems.append(f"changelog {info.path}: header says version {meta.version} "
                                f"id {meta.unique_id}")
        except (ChangelogError, BackendError) as exc:
            problems.append(f"changelog {info.path}: {exc}")
    sizes = {info.path: info.size for info in listing.data_files}
    checked: set[str] = set()
    for _, info in listing.manifests:
        try:
            manifest = storage.loop.run(aread_manifest(storage, info.path))
        except MaterializerError as exc:
            problems.append(f"snapshot {info.path}: {exc}")
            continue
        problems += _verify_snapshot_files(storage, info.path, manifest, sizes, checked)
    return problems


def _verify_snapshot_files(storage: RemoteFiles, manifest_path: str, manifest: SnapshotManifest,
                           sizes: dict[str, int], checked: set[str]) -> list[str]:
    problems: list[str] = []
    for file in manifest.files:
        if file.dfs_path in checked:
            continue
        checked.add(file.dfs_path)
        if file.dfs_path not in sizes:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path} is missing")
            continue
        if sizes[file.dfs_path] != file.size:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path} has "
                            f"{sizes[file.dfs_path]} bytes, manifest says {file.size}")
            continue
        try:
            data = _get(storage, file.dfs_path)
        except ChangelogError as exc:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path}: {exc}")
            continue
        if crc32_of(data) != file.checksum:
            problems.append(f"snapshot {manifest_path}: file {file.dfs_path} fails its "
                            f"checksum (CRC-32 {crc32_of(data):#010x}, manifest "
                            f"{file.checksum:#010x})")
    return problems
