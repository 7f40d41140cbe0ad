"""Finding and reading manifests in a store's remote directory."""

from __future__ import annotations

import posixpath

from pyspark_dstl.changelog.changelog_errors import ChangelogError, ObjectNotFoundError
from pyspark_dstl.materializer.manifest import SnapshotManifest, decode_manifest
from pyspark_dstl.materializer.materializer_errors import MaterializerError, SnapshotNotFoundError
from pyspark_dstl.materializer.names import check_remote_dir, parse_manifest_name
from pyspark_dstl.materializer.remote import RemoteFiles


async def alist_manifests(storage: RemoteFiles, remote_dir: str) -> list[tuple[int, str, str]]:
    """(version, unique_id, path) of every manifest directly in `remote_dir`, oldest first.

    Only manifests are listed, and a manifest is written after all its files, so a snapshot
    whose upload stopped half-way never shows up here.
    """
    prefix = check_remote_dir(remote_dir) + "/"
    try:
        infos = await storage.alist(prefix)
    except ChangelogError as exc:
        raise MaterializerError(f"cannot list snapshots under {prefix!r}") from exc
    found = []
    for info in infos:
        if posixpath.dirname(info.path) != prefix[:-1]:
            continue
        parsed = parse_manifest_name(posixpath.basename(info.path))
        if parsed is not None:
            found.append((parsed[0], parsed[1], info.path))
    return sorted(found)


def list_manifests(storage: RemoteFiles, remote_dir: str) -> list[tuple[int, str, str]]:
    """Blocking form of alist_manifests; never call it from the storage loop thread."""
    return storage.loop.run(alist_manifests(storage, remote_dir))


async def aread_manifest(storage: RemoteFiles, path: str) -> SnapshotManifest:
    """Download and verify a manifest; SnapshotNotFoundError when it does not exist."""
    try:
        data = await storage.aget(path)
    except ObjectNotFoundError as exc:
        raise SnapshotNotFoundError(f"snapshot manifest {path!r} does not exist") from exc
    except ChangelogError as exc:
        raise MaterializerError(f"cannot read snapshot manifest {path!r}") from exc
    return decode_manifest(data, path)


async def amissing_files(storage: RemoteFiles, manifest: SnapshotManifest) -> list[str]:
    """Remote paths the manifest names that are absent or not of the recorded size.

    One listing per folder the files live in (the store's sst/ and meta/), not one request
    per file; sizes catch a file replaced by a shorter one, checksums are the restore's job.
    """
    present: dict[str, int] = {}
    for folder in sorted({posixpath.dirname(f.dfs_path) for f in manifest.files}):
        try:
            infos = await storage.alist(folder + "/")
        except ChangelogError as exc:
            raise MaterializerError(f"cannot list {folder!r} to check the files of snapshot "
                                    f"{manifest.version}_{manifest.unique_id}") from exc
        present.update((info.path, info.size) for info in infos)
    return [f.dfs_path for f in manifest.files if present.get(f.dfs_path) != f.size]
