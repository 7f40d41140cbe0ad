"""The durable short-term log (FLIP-158 DSTL): writers, batched hedged uploads, handles, readers."""

from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    FormatError,
    HandleError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    SqnError,
    StorageError,
    TransientStorageError,
    UploadFailedError,
    WriterClosedError,
)
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_service import ChangelogService, SyncReader
from pyspark_dstl.changelog.changelog_settings import CHANGELOG_CONF_KEYS, ChangelogSettings
from pyspark_dstl.changelog.files import LogInFile, read_file_header, read_file_log
from pyspark_dstl.changelog.format import ChangeSet, LogHeader
from pyspark_dstl.changelog.reader import ChangelogReader
from pyspark_dstl.changelog.storage import open_storage
from pyspark_dstl.changelog.storage.base import ObjectInfo, Storage
from pyspark_dstl.changelog.storage.storage_settings import StorageSettings
from pyspark_dstl.changelog.writer import ChangelogWriter
from pyspark_dstl.core.errors import ConfigError

__all__ = [
    "CHANGELOG_CONF_KEYS",
    "ChangeSet",
    "ChangelogError",
    "ChangelogHandle",
    "ChangelogReader",
    "ChangelogService",
    "ChangelogSettings",
    "ChangelogWriter",
    "ConfigError",
    "FormatError",
    "HandleError",
    "LogHeader",
    "LogInFile",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "PermanentStorageError",
    "Segment",
    "SqnError",
    "Storage",
    "StorageError",
    "StorageSettings",
    "SyncReader",
    "TransientStorageError",
    "UploadFailedError",
    "WriterClosedError",
    "open_storage",
    "read_file_header",
    "read_file_log",
]
