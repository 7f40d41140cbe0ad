"""The durable short-term log (FLIP-158 DSTL): writers, batched hedged uploads, handles, readers."""

from changelog.config import CONF_KEYS, ChangelogOptions
from changelog.errors import (
    ChangelogError,
    ConfigError,
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
from changelog.format import ChangeSet, LogHeader
from changelog.handle import ChangelogHandle, Segment
from changelog.reader import ChangelogReader
from changelog.storage import open_storage
from changelog.storage.base import ObjectInfo, ObjectStore
from changelog.storage_service import ChangelogStorage, SyncReader
from changelog.writer import ChangelogWriter

__all__ = [
    "CONF_KEYS",
    "ChangeSet",
    "ChangelogError",
    "ChangelogHandle",
    "ChangelogOptions",
    "ChangelogReader",
    "ChangelogStorage",
    "ChangelogWriter",
    "ConfigError",
    "FormatError",
    "HandleError",
    "LogHeader",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "PermanentStorageError",
    "Segment",
    "SqnError",
    "StorageError",
    "SyncReader",
    "TransientStorageError",
    "UploadFailedError",
    "WriterClosedError",
    "open_storage",
]
