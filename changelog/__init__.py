"""The durable short-term log (FLIP-158 DSTL): writers, batched hedged uploads, handles, readers.

The names here load on first use: importing the package imports no storage or codec.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import load_lazy_name

_NAMES = {
    "CHANGELOG_CONF_KEYS": "pyspark_dstl.changelog.changelog_settings",
    "ChangelogError": "pyspark_dstl.changelog.changelog_errors",
    "ChangelogHandle": "pyspark_dstl.changelog.changelog_handle",
    "ChangelogReader": "pyspark_dstl.changelog.reader",
    "ChangelogService": "pyspark_dstl.changelog.changelog_service",
    "ChangelogSettings": "pyspark_dstl.changelog.changelog_settings",
    "ChangelogWriter": "pyspark_dstl.changelog.writer",
    "ChangeSet": "pyspark_dstl.changelog.format",
    "ConfigError": "pyspark_dstl.core.errors",
    "FormatError": "pyspark_dstl.changelog.changelog_errors",
    "HandleError": "pyspark_dstl.changelog.changelog_errors",
    "LogHeader": "pyspark_dstl.changelog.format",
    "LogInFile": "pyspark_dstl.changelog.files",
    "ObjectExistsError": "pyspark_dstl.changelog.changelog_errors",
    "ObjectInfo": "pyspark_dstl.changelog.storage.base",
    "ObjectNotFoundError": "pyspark_dstl.changelog.changelog_errors",
    "open_storage": "pyspark_dstl.changelog.storage",
    "PermanentStorageError": "pyspark_dstl.changelog.changelog_errors",
    "read_file_header": "pyspark_dstl.changelog.files",
    "read_file_log": "pyspark_dstl.changelog.files",
    "Segment": "pyspark_dstl.changelog.changelog_handle",
    "SqnError": "pyspark_dstl.changelog.changelog_errors",
    "Storage": "pyspark_dstl.changelog.storage.base",
    "StorageError": "pyspark_dstl.changelog.changelog_errors",
    "StorageSettings": "pyspark_dstl.changelog.storage.storage_settings",
    "SyncReader": "pyspark_dstl.changelog.changelog_service",
    "TransientStorageError": "pyspark_dstl.changelog.changelog_errors",
    "UploadFailedError": "pyspark_dstl.changelog.changelog_errors",
    "WriterClosedError": "pyspark_dstl.changelog.changelog_errors",
}


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
