"""Rebuild a RocksDB directory from a manifest: cached or downloaded files, linked into place."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyspark_dstl.changelog.changelog_errors import ChangelogError, ObjectNotFoundError
from pyspark_dstl.materializer.checksum import ChecksumCache, file_checksum
from pyspark_dstl.materializer.file_cache import FileCache
from pyspark_dstl.materializer.manifest import SnapshotFile, SnapshotManifest
from pyspark_dstl.materializer.materializer_errors import MaterializerError, SnapshotCorruptError
from pyspark_dstl.materializer.metrics import Metrics
from pyspark_dstl.materializer.names import is_immutable
from pyspark_dstl.materializer.remote import RemoteFiles


@dataclass(frozen=True)
class RestoredSnapshot:
    """The manifest restored and the directory holding its DB; open it with `open_db`."""

    manifest: SnapshotManifest
    db_path: str


class SnapshotRestorer:
    """Downloads in parallel worker threads (so file writes stay off the storage loop)."""

    def __init__(self, storage: RemoteFiles, parallelism: int, checksums: ChecksumCache,
                 metrics: Metrics) -> None:
        self._storage = storage
        self._parallelism = parallelism
        self._checksums = checksums
        self._metrics = metrics

    def restore(self, manifest: SnapshotManifest, cache: FileCache,
                target_dir: str) -> RestoredSnapshot:
        _prepare_target(target_dir)
        with ThreadPoolExecutor(self._parallelism, thread_name_prefix="dstl-restore") as pool:
            sources = list(pool.map(lambda f: self._fetch(f, cache), manifest.files))
        for file, source in zip(manifest.files, sources, strict=True):
            self._place(file, source, target_dir)
        return RestoredSnapshot(manifest, target_dir)

    def _fetch(self, file: SnapshotFile, cache: FileCache) -> str:
        cached = cache.lookup(file)
        if cached is not None:
            return cached
        try:
            data = self._storage.loop.run(self._storage.aget(file.dfs_path))
        except ObjectNotFoundError as exc:
            raise SnapshotCorruptError(f"snapshot file {file.dfs_path!r} (local name "
                                       f"{file.local_name!r}) is missing", file.dfs_path) from exc
        except ChangelogError as exc:
            raise MaterializerError(f"cannot download snapshot file {file.dfs_path!r}: "
                                    f"{exc}") from exc
        self._metrics.add("restore_files_downloaded")
        self._metrics.add("restore_bytes_downloaded", len(data))
        return cache.store(file, data)

    def _place(self, file: SnapshotFile, source: str, target_dir: str) -> None:
        """Hard-link immutable files (SST, blob); copy the ones RocksDB appends to or renames."""
        target = os.path.join(target_dir, file.local_name)
        linked = False
        if is_immutable(file.local_name):
            try:
                os.link(source, target)
                linked = True
            except OSError:
                pass
        if linked:  # the very inode the cache just verified
            size, crc = os.path.getsize(target), file.checksum
        else:
            shutil.copyfile(source, target)
            size, crc = file_checksum(target)
        if (size, crc) != (file.size, file.checksum):
            raise SnapshotCorruptError(f"restored file {target!r} does not match its manifest "
                                       f"entry ({size} bytes, CRC {crc:08x})", target)
        self._checksums.remember(target, file.checksum)


def _prepare_target(target_dir: str) -> None:
    if os.path.isdir(target_dir) and os.listdir(target_dir):
        raise MaterializerError(f"restore target {target_dir!r} is not empty")
    os.makedirs(target_dir, exist_ok=True)
