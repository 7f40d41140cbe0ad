"""Upload one link copy: new files in parallel, reused ones checked, manifest last."""

from __future__ import annotations

import json
import os
import posixpath
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.changelog.changelog_errors import ChangelogError, ObjectExistsError
from pyspark_dstl.materializer.checksum import ChecksumCache, crc32_of
from pyspark_dstl.materializer.link_copy import LinkCopy
from pyspark_dstl.materializer.manifest import SnapshotFile, SnapshotManifest, encode_manifest
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle, SnapshotRequest
from pyspark_dstl.materializer.materializer_errors import (
    ManifestExistsError,
    MaterializerError,
    SnapshotCorruptError,
    SnapshotUploadError,
)
from pyspark_dstl.materializer.metrics import Metrics
from pyspark_dstl.materializer.names import manifest_path, remote_file_path
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.materializer.upload.dedup import UploadedFiles

ROCKSDICT_CONFIG = "rocksdict-config.json"


@dataclass
class _Planned:
    local_name: str
    local_path: str
    size: int
    checksum: int
    reuse: str | None = None
    shared: bool = False  # `reuse` is another store's file, named in place

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.local_name, self.size, self.checksum)


class SnapshotUploader:
    """Runs in a worker thread; file reads stay off the storage loop, requests run on it."""

    def __init__(self, storage: RemoteFiles, uploaded: UploadedFiles, checksums: ChecksumCache,
                 metrics: Metrics, parallelism: int,
                 shared: UploadedFiles | None = None) -> None:
        """`shared`: per store, remote files of other stores its snapshot may name in place
        instead of uploading (a rescale's new store made from an old one's files); the
        manifest then names them where they are."""
        self._storage = storage
        self._uploaded = uploaded
        self._shared = shared or UploadedFiles()
        self._checksums = checksums
        self._metrics = metrics
        self._parallelism = parallelism

    def upload(self, link_copy: LinkCopy, request: SnapshotRequest,
               remote_dir: str) -> MaterializedHandle:
        started = time.monotonic()
        planned = [self._plan(link_copy.directory, name, request.store_id)
                   for name in link_copy.file_names()]
        self._drop_vanished_reuses(planned, request.store_id)
        files, new_bytes = self._upload_new(planned, request, remote_dir)
        manifest = SnapshotManifest(
            store_id=request.store_id, version=request.version, unique_id=request.unique_id,
            sqn=request.sqn, lineage=request.lineage, files=tuple(files),
            column_families=link_copy.column_families, key_counts=link_copy.key_counts,
            rocksdb=_rocksdb_facts(link_copy.directory, [p.local_name for p in planned]),
            created_ms=int(time.time() * 1000), metadata=dict(request.metadata))
        path = self._write_manifest(manifest, remote_dir)
        self._metrics.set("last_upload_seconds", time.monotonic() - started)
        return MaterializedHandle(
            store_id=request.store_id, version=request.version, unique_id=request.unique_id,
            sqn=request.sqn, manifest_path=path, total_bytes=manifest.total_bytes,
            incremental_bytes=new_bytes, file_count=len(files))

    def _plan(self, directory: str, name: str, store_id: str) -> _Planned:
        local_path = os.path.join(directory, name)
        size, checksum = self._checksums.checksum(local_path)
        item = _Planned(name, local_path, size, checksum)
        item.reuse = self._uploaded.lookup(store_id, item.key)
        if item.reuse is None:
            item.reuse = self._shared.lookup(store_id, item.key)
            item.shared = item.reuse is not None
        return item

    def _drop_vanished_reuses(self, planned: list[_Planned], store_id: str) -> None:
        """One listing per remote folder guards against a cleanup that removed a reused copy."""
        reused = [p for p in planned if p.reuse is not None]
        folders = {posixpath.dirname(p.reuse) for p in reused if p.reuse is not None}
        present: dict[str, int] = {}
        for folder in sorted(folders):
            try:
                infos = self._storage.loop.run(self._storage.alist(folder + "/"))
            except ChangelogError as exc:
                raise SnapshotUploadError(f"snapshot of store {store_id!r}: cannot list "
                                          f"{folder!r} to check reused files") from exc
            present.update((info.path, info.size) for info in infos)
        for item in reused:
            if item.reuse is not None and present.get(item.reuse) != item.size:
                self._uploaded.forget(store_id, [item.reuse])
                self._shared.forget(store_id, [item.reuse])
                self._metrics.add("reused_missing")
                item.reuse = None
                item.shared = False

    def _upload_new(self, planned: list[_Planned], request: SnapshotRequest,
                    remote_dir: str) -> tuple[list[SnapshotFile], int]:
        store_id = request.store_id
        done: dict[str, str] = {p.local_name: p.reuse for p in planned if p.reuse is not None}
        pending: dict[Future[Any], tuple[_Planned, str]] = {}
        new_bytes = 0
        try:
            for item in planned:
                if item.reuse is not None:
                    if item.shared:
                        self._uploaded.add(store_id, item.key, item.reuse)
                        self._metrics.add("files_referenced")
                        self._metrics.add("bytes_referenced", item.size)
                    else:
                        self._metrics.add("files_reused")
                        self._metrics.add("bytes_reused", item.size)
                    continue
                while len(pending) >= self._parallelism:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    new_bytes += self._collect(finished, pending, done, store_id)
                dfs_path = remote_file_path(remote_dir, item.local_name, request.version)
                data = _read_verified(item)
                future = self._storage.loop.submit(self._storage.aput(dfs_path, data))
                pending[future] = (item, dfs_path)
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                new_bytes += self._collect(finished, pending, done, store_id)
        except BaseException:
            for future in pending:
                future.cancel()
            wait(pending)
            raise
        files = [SnapshotFile(p.local_name, done[p.local_name], p.size, p.checksum)
                 for p in planned]
        return files, new_bytes

    def _collect(self, finished: set[Future[Any]], pending: dict[Future[Any], tuple[_Planned, str]],
                 done: dict[str, str], store_id: str) -> int:
        """Bytes uploaded by the finished requests."""
        total = 0
        for future in finished:
            item, dfs_path = pending.pop(future)
            error = future.exception()
            if error is not None:
                self._metrics.add("file_upload_failures")
                raise SnapshotUploadError(
                    f"snapshot of store {store_id!r}: upload of {item.local_name!r} to "
                    f"{dfs_path!r} failed: {error}") from error
            self._uploaded.add(store_id, item.key, dfs_path)
            done[item.local_name] = dfs_path
            self._metrics.add("files_uploaded")
            self._metrics.add("bytes_uploaded", item.size)
            total += item.size
        return total

    def _write_manifest(self, manifest: SnapshotManifest, remote_dir: str) -> str:
        """Create-only and last, so a snapshot is listed only once all its files exist."""
        data = encode_manifest(manifest)
        path = manifest_path(remote_dir, manifest.version, manifest.unique_id)
        try:
            try:
                self._storage.loop.run(self._storage.aput(path, data))
            except ChangelogError as exc:
                if not _name_taken(exc):
                    raise
                if self._storage.loop.run(self._storage.aget(path)) != data:
                    raise ManifestExistsError(
                        f"snapshot manifest {path!r} already exists with other content; "
                        f"(version, unique id) must be unique per attempt") from exc
        except (ChangelogError, OSError) as exc:
            raise SnapshotUploadError(f"snapshot of store {manifest.store_id!r}: writing "
                                      f"manifest {path!r} failed: {exc}") from exc
        return path

def _name_taken(exc: BaseException) -> bool:
    """True when a create-only write failed because the name exists (possibly wrapped)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ObjectExistsError):
            return True
        seen = seen.__cause__
    return False


def _read_verified(item: _Planned) -> bytes:
    """Read the bytes to upload and prove they are the ones the checksum describes."""
    with open(item.local_path, "rb") as handle:
        data = handle.read()
    if len(data) != item.size or crc32_of(data) != item.checksum:
        raise SnapshotCorruptError(f"link copy file {item.local_path!r} changed while "
                                   f"it was being uploaded", item.local_path)
    return data


def _rocksdb_facts(directory: str, names: list[str]) -> dict[str, Any]:
    """What a reader needs to open the DB the same way: raw mode, rocksdict config, OPTIONS."""
    facts: dict[str, Any] = {
        "raw_mode": True,
        "options_file": next((n for n in names if n.startswith("OPTIONS-")), None),
    }
    config = os.path.join(directory, ROCKSDICT_CONFIG)
    if os.path.exists(config):
        try:
            with open(config, encoding="utf-8") as handle:
                facts["rocksdict_config"] = json.load(handle)
        except (OSError, ValueError) as exc:
            raise MaterializerError(f"unreadable {config!r}: {exc}") from exc
    return facts
