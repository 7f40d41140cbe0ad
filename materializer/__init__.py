"""RocksDB snapshots for the changelog state backend: incremental, scheduled, restorable."""

from materializer.errors import (
    ManifestError,
    ManifestExistsError,
    MaterializationFailedError,
    MaterializerClosedError,
    MaterializerConfigError,
    MaterializerError,
    SnapshotCorruptError,
    SnapshotNotFoundError,
    SnapshotUploadError,
    StoreNotRegisteredError,
)
from materializer.handle import HandleFormatError, MaterializedHandle, SnapshotRequest
from materializer.listing import alist_manifests, amissing_files, aread_manifest, list_manifests
from materializer.local import open_db
from materializer.manifest import (
    SnapshotFile,
    SnapshotManifest,
    decode_manifest,
    encode_manifest,
    referenced_files,
)
from materializer.materializer import Materializer
from materializer.names import parse_manifest_name, parse_uploaded_version
from materializer.options import MaterializerOptions
from materializer.remote import RemoteFiles
from materializer.restore import RestoredSnapshot
from materializer.schedule import Decision

__all__ = [
    "Decision",
    "HandleFormatError",
    "ManifestError",
    "ManifestExistsError",
    "MaterializationFailedError",
    "MaterializedHandle",
    "Materializer",
    "MaterializerClosedError",
    "MaterializerConfigError",
    "MaterializerError",
    "MaterializerOptions",
    "RemoteFiles",
    "RestoredSnapshot",
    "SnapshotCorruptError",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotNotFoundError",
    "SnapshotRequest",
    "SnapshotUploadError",
    "StoreNotRegisteredError",
    "alist_manifests",
    "amissing_files",
    "aread_manifest",
    "decode_manifest",
    "encode_manifest",
    "list_manifests",
    "open_db",
    "parse_manifest_name",
    "parse_uploaded_version",
    "referenced_files",
]
