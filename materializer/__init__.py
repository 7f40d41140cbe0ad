"""RocksDB snapshots for the changelog state backend: incremental, scheduled, restorable."""

from pyspark_dstl.materializer.link_copy import open_db
from pyspark_dstl.materializer.manifest import (
    SnapshotFile,
    SnapshotManifest,
    decode_manifest,
    encode_manifest,
    referenced_files,
)
from pyspark_dstl.materializer.manifest_listing import (
    alist_manifests,
    amissing_files,
    aread_manifest,
    list_manifests,
)
from pyspark_dstl.materializer.materialized_handle import (
    HandleFormatError,
    MaterializedHandle,
    SnapshotRequest,
)
from pyspark_dstl.materializer.materializer import Materializer
from pyspark_dstl.materializer.materializer_errors import (
    ManifestError,
    ManifestExistsError,
    MaterializationFailedError,
    MaterializerClosedError,
    MaterializerError,
    SnapshotCorruptError,
    SnapshotNotFoundError,
    SnapshotRequestError,
    SnapshotUploadError,
    StoreNotRegisteredError,
)
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from pyspark_dstl.materializer.names import parse_manifest_name, parse_uploaded_version
from pyspark_dstl.materializer.remote import RemoteFiles
from pyspark_dstl.materializer.restore import RestoredSnapshot
from pyspark_dstl.materializer.upload.schedule import SnapshotDecision

__all__ = [
    "HandleFormatError",
    "ManifestError",
    "ManifestExistsError",
    "MaterializationFailedError",
    "MaterializedHandle",
    "Materializer",
    "MaterializerClosedError",
    "MaterializerError",
    "MaterializerSettings",
    "RemoteFiles",
    "RestoredSnapshot",
    "SnapshotCorruptError",
    "SnapshotDecision",
    "SnapshotFile",
    "SnapshotManifest",
    "SnapshotNotFoundError",
    "SnapshotRequest",
    "SnapshotRequestError",
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
