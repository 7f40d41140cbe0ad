"""The snapshot manifest: its byte format, and reading which files a set of manifests needs.

Layout: magic b"DSTLSNAP" (8) | format version u16 | body length u32 | CRC-32 of body u32 |
body (msgpack map). All integers big-endian. See docs/materializer.md for the body fields.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from pyspark_dstl.changelog.changelog_errors import StorageError
from pyspark_dstl.changelog.storage.base import check_key
from pyspark_dstl.core.errors import excerpt
from pyspark_dstl.materializer.checksum import crc32_of
from pyspark_dstl.materializer.materializer_errors import ManifestError
from pyspark_dstl.materializer.names import check_local_name, check_unique_id

MAGIC = b"DSTLSNAP"
FORMAT_VERSION = 1
HEADER = struct.Struct(">8sHII")
MAX_BODY = 256 * 1024 * 1024


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot: its name in the RocksDB directory and its immutable remote copy."""

    local_name: str
    dfs_path: str
    size: int
    checksum: int

    @property
    def key(self) -> tuple[str, int, int]:
        """What must match for a local file to reuse this remote copy."""
        return (self.local_name, self.size, self.checksum)


@dataclass(frozen=True)
class SnapshotManifest:
    """Everything needed to rebuild one RocksDB checkpoint and to place it in its lineage."""

    store_id: str
    version: int
    unique_id: str
    sqn: int
    lineage: tuple[tuple[int, str], ...]
    files: tuple[SnapshotFile, ...]
    column_families: tuple[str, ...]
    key_counts: Mapping[str, int]
    rocksdb: Mapping[str, Any]
    created_ms: int
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def estimated_keys(self) -> int:
        return sum(self.key_counts.values())


def encode_manifest(manifest: SnapshotManifest) -> bytes:
    body = msgpack.packb({
        "store_id": manifest.store_id,
        "version": manifest.version,
        "unique_id": manifest.unique_id,
        "sqn": manifest.sqn,
        "lineage": [[v, u] for v, u in manifest.lineage],
        "files": [[f.local_name, f.dfs_path, f.size, f.checksum] for f in manifest.files],
        "column_families": list(manifest.column_families),
        "key_counts": dict(manifest.key_counts),
        "rocksdb": dict(manifest.rocksdb),
        "created_ms": manifest.created_ms,
        "metadata": dict(manifest.metadata),
    }, use_bin_type=True)
    return HEADER.pack(MAGIC, FORMAT_VERSION, len(body), crc32_of(body)) + body


def decode_manifest(data: bytes, path: str | None = None) -> SnapshotManifest:
    """Parse and verify a manifest; ManifestError (naming `path`) for anything wrong."""
    if len(data) < HEADER.size:
        raise ManifestError(f"truncated manifest: {len(data)} bytes, header needs "
                            f"{HEADER.size}", path)
    magic, version, length, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ManifestError(f"not a snapshot manifest: magic {magic!r}", path)
    if version != FORMAT_VERSION:
        raise ManifestError(f"unsupported manifest format version {version} "
                            f"(this library reads {FORMAT_VERSION})", path)
    body = data[HEADER.size:]
    if length != len(body) or length > MAX_BODY:
        raise ManifestError(f"manifest body is {len(body)} bytes, header says {length}", path)
    if crc32_of(body) != crc:
        raise ManifestError("manifest CRC mismatch: the bytes were altered", path)
    try:
        fields = msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ManifestError(f"manifest body is not valid msgpack: {excerpt(exc)}",
                            path) from exc
    return _from_fields(fields, path)


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the manifest format")


def _from_fields(fields: Any, path: str | None) -> SnapshotManifest:
    if not isinstance(fields, dict):
        raise ManifestError("manifest body is not a map", path)
    try:
        manifest = SnapshotManifest(
            store_id=_get(fields, "store_id", str, path),
            version=_get(fields, "version", int, path),
            unique_id=check_unique_id(_get(fields, "unique_id", str, path)),
            sqn=_get(fields, "sqn", int, path),
            lineage=tuple((int(v), str(u)) for v, u in _get(fields, "lineage", list, path)),
            files=tuple(_file(entry, path) for entry in _get(fields, "files", list, path)),
            column_families=tuple(str(c) for c in _get(fields, "column_families", list, path)),
            key_counts={str(k): int(v)
                        for k, v in _get(fields, "key_counts", dict, path).items()},
            rocksdb=_get(fields, "rocksdb", dict, path),
            created_ms=_get(fields, "created_ms", int, path),
            metadata=_get(fields, "metadata", dict, path),
        )
    except ManifestError:
        raise
    except Exception as exc:  # any shape problem in an untrusted body
        raise ManifestError(f"malformed manifest body: {excerpt(exc)}", path) from exc
    names = [f.local_name for f in manifest.files]
    if len(set(names)) != len(names):
        raise ManifestError("manifest lists a local file name twice", path)
    return manifest


def _file(entry: Any, path: str | None) -> SnapshotFile:
    if not isinstance(entry, list) or len(entry) != 4:
        raise ManifestError(f"malformed file entry {excerpt(entry)}", path)
    local_name, dfs_path, size, checksum = entry
    if not isinstance(local_name, str) or not check_local_name(local_name):
        raise ManifestError(f"unsafe local file name {excerpt(local_name)}", path)
    try:
        check_key(dfs_path)
    except (StorageError, TypeError) as exc:
        raise ManifestError(f"invalid remote path {excerpt(dfs_path)}", path) from exc
    if (not isinstance(size, int) or not isinstance(checksum, int) or size < 0
            or not 0 <= checksum <= 0xFFFFFFFF):
        raise ManifestError(f"invalid size/checksum in file entry {excerpt(entry)}", path)
    return SnapshotFile(local_name, dfs_path, size, checksum)


def _get(fields: dict[Any, Any], name: str, kind: type, path: str | None) -> Any:
    if name not in fields:
        raise ManifestError(f"manifest lacks field {name!r}", path)
    value = fields[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ManifestError(f"manifest field {name!r} must be {kind.__name__}, "
                            f"got {type(value).__name__}", path)
    return value


def referenced_files(manifests: Iterable[SnapshotManifest]) -> set[str]:
    """Every remote file key the given manifests need (the manifests themselves excluded)."""
    return {f.dfs_path for manifest in manifests for f in manifest.files}
