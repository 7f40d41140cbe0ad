"""A per-store directory of downloaded snapshot files, keyed by remote path, verified on use."""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import tempfile

from pyspark_dstl.materializer.checksum import crc32_of, file_checksum
from pyspark_dstl.materializer.manifest import SnapshotFile
from pyspark_dstl.materializer.materializer_errors import SnapshotCorruptError
from pyspark_dstl.materializer.metrics import Metrics


class FileCache:
    """Remote files are immutable, so a cached copy stays valid as long as its bytes do.

    Every use re-reads and checks size and CRC (restores are rare, silent corruption is not
    acceptable); a bad entry is deleted so the caller fetches it again.
    """

    def __init__(self, directory: str, metrics: Metrics) -> None:
        self.directory = directory
        self._metrics = metrics
        os.makedirs(directory, exist_ok=True)

    def entry_path(self, dfs_path: str) -> str:
        digest = hashlib.sha256(dfs_path.encode()).hexdigest()[:24]
        return os.path.join(self.directory, f"{digest}-{posixpath.basename(dfs_path)}")

    def lookup(self, file: SnapshotFile) -> str | None:
        """The verified cached copy of `file`, or None (a corrupt copy is removed)."""
        path = self.entry_path(file.dfs_path)
        try:
            size, crc = file_checksum(path)
        except FileNotFoundError:
            return None
        if (size, crc) == (file.size, file.checksum):
            self._metrics.add("restore_files_from_cache")
            return path
        self._metrics.add("cache_corrupt_entries")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return None

    def store(self, file: SnapshotFile, data: bytes) -> str:
        """Verify downloaded bytes against the manifest, then publish them atomically."""
        if len(data) != file.size or crc32_of(data) != file.checksum:
            raise SnapshotCorruptError(
                f"remote snapshot file {file.dfs_path!r} (local name {file.local_name!r}) does "
                f"not match its manifest: {len(data)} bytes, expected {file.size} with CRC "
                f"{file.checksum:08x}", file.dfs_path)
        path = self.entry_path(file.dfs_path)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return path
