"""The durable short-term log (FLIP-158 DSTL): writers, batched hedged uploads, handles, readers.

The names here load on first use: importing the package imports no storage or codec.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import by_module, load_lazy_name

_NAMES = by_module({
    "pyspark_dstl.changelog.changelog_errors": (
        "ChangelogError", "FormatError", "HandleError", "ObjectExistsError", "ObjectNotFoundError",
        "PermanentStorageError", "SqnError", "StorageError", "TransientStorageError",
        "UploadFailedError", "WriterClosedError"
    ),
    "pyspark_dstl.changelog.changelog_handle": ("ChangelogHandle", "Segment"),
    "pyspark_dstl.changelog.changelog_service": ("ChangelogService", "SyncReader"),
    "pyspark_dstl.changelog.changelog_settings": ("CHANGELOG_SETTING_KEYS", "ChangelogSettings"),
    "pyspark_dstl.changelog.files": ("LogInFile", "read_file_header", "read_file_log"),
    "pyspark_dstl.changelog.format": ("ChangeSet", "LogHeader"),
    "pyspark_dstl.changelog.reader": ("ChangelogReader",),
    "pyspark_dstl.changelog.storage": ("open_storage",),
    "pyspark_dstl.changelog.storage.base": ("ObjectInfo", "Storage"),
    "pyspark_dstl.changelog.storage.storage_settings": ("StorageSettings",),
    "pyspark_dstl.changelog.writer": ("ChangelogWriter",),
    "pyspark_dstl.core.errors": ("ConfigError",),
})


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
