"""RocksDB snapshots for the changelog state backend: incremental, scheduled, restorable.

The names here load on first use: importing the package does not import rocksdict.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import load_lazy_name

_NAMES = {
    "alist_manifests": "pyspark_dstl.materializer.manifest_listing",
    "amissing_files": "pyspark_dstl.materializer.manifest_listing",
    "aread_manifest": "pyspark_dstl.materializer.manifest_listing",
    "decode_manifest": "pyspark_dstl.materializer.manifest",
    "encode_manifest": "pyspark_dstl.materializer.manifest",
    "HandleFormatError": "pyspark_dstl.materializer.materialized_handle",
    "list_manifests": "pyspark_dstl.materializer.manifest_listing",
    "ManifestError": "pyspark_dstl.materializer.materializer_errors",
    "ManifestExistsError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializationFailedError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializedHandle": "pyspark_dstl.materializer.materialized_handle",
    "Materializer": "pyspark_dstl.materializer.materializer",
    "MaterializerClosedError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializerError": "pyspark_dstl.materializer.materializer_errors",
    "MaterializerSettings": "pyspark_dstl.materializer.materializer_settings",
    "open_db": "pyspark_dstl.materializer.link_copy",
    "parse_manifest_name": "pyspark_dstl.materializer.names",
    "parse_uploaded_version": "pyspark_dstl.materializer.names",
    "referenced_files": "pyspark_dstl.materializer.manifest",
    "RemoteFiles": "pyspark_dstl.materializer.remote",
    "RestoredSnapshot": "pyspark_dstl.materializer.restore",
    "SnapshotCorruptError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotDecision": "pyspark_dstl.materializer.upload.schedule",
    "SnapshotFile": "pyspark_dstl.materializer.manifest",
    "SnapshotManifest": "pyspark_dstl.materializer.manifest",
    "SnapshotNotFoundError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotRequest": "pyspark_dstl.materializer.materialized_handle",
    "SnapshotRequestError": "pyspark_dstl.materializer.materializer_errors",
    "SnapshotUploadError": "pyspark_dstl.materializer.materializer_errors",
    "StoreNotRegisteredError": "pyspark_dstl.materializer.materializer_errors",
}


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
