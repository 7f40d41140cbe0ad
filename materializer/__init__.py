"""RocksDB snapshots for the changelog state backend: incremental, scheduled, restorable.

The names here load on first use: importing the package does not import rocksdict.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import by_module, load_lazy_name

_NAMES = by_module({
    "pyspark_dstl.materializer.link_copy": ("open_db",),
    "pyspark_dstl.materializer.manifest": (
        "decode_manifest", "encode_manifest", "referenced_files", "SnapshotFile", "SnapshotManifest"
    ),
    "pyspark_dstl.materializer.manifest_listing": (
        "alist_manifests", "amissing_files", "aread_manifest", "list_manifests"
    ),
    "pyspark_dstl.materializer.materialized_handle": (
        "HandleFormatError", "MaterializedHandle", "SnapshotRequest"
    ),
    "pyspark_dstl.materializer.materializer": ("Materializer",),
    "pyspark_dstl.materializer.materializer_errors": (
        "ManifestError", "ManifestExistsError", "MaterializationFailedError",
        "MaterializerClosedError", "MaterializerError", "SnapshotCorruptError",
        "SnapshotNotFoundError", "SnapshotRequestError", "SnapshotUploadError",
        "StoreNotRegisteredError"
    ),
    "pyspark_dstl.materializer.materializer_settings": ("MaterializerSettings",),
    "pyspark_dstl.materializer.names": ("parse_manifest_name", "parse_uploaded_version"),
    "pyspark_dstl.materializer.remote": ("RemoteFiles",),
    "pyspark_dstl.materializer.restore": ("RestoredSnapshot",),
    "pyspark_dstl.materializer.upload.schedule": ("SnapshotDecision",),
})


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
