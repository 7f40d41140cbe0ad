"""Exceptions of the changelog package; everything raised here derives from ChangelogError."""

from __future__ import annotations

from pyspark_dstl.core.errors import DstlError, DstlWarning, LoopClosedError


class ChangelogError(DstlError):
    """Root of every error the changelog package raises."""


class NonAtomicStorageWarning(DstlWarning):
    """The storage's create-only write is not atomic: one writer per name is not enforced
    (fsspec protocols other than file:// and s3://)."""


# --- storage -----------------------------------------------------------------------------------


class StorageError(ChangelogError):
    """A storage operation failed; the message names the path."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ObjectExistsError(StorageError):
    """A create-only write found the name taken (S3 412, local EEXIST)."""


class ObjectNotFoundError(StorageError):
    """The path does not exist."""


class TransientStorageError(StorageError):
    """Worth retrying: throttling, 5xx, connection errors, timeouts, S3 409 conflicts."""


class PermanentStorageError(StorageError):
    """Not worth retrying: 403, 404 on write paths, bad requests, invalid names."""


class UnsupportedStorageError(StorageError):
    """The URL scheme or an option of it is not supported."""


# --- upload / writer ---------------------------------------------------------------------------


class UploadFailedError(ChangelogError):
    """An upload gave up; __cause__ holds the last error, the message names the path."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class WriterClosedError(ChangelogError, LoopClosedError):
    """The writer (or its storage) was closed."""


class SqnError(ChangelogError, ValueError):
    """A sequence number is outside what the writer holds (truncated or in the future)."""


# --- format ------------------------------------------------------------------------------------


class FormatError(ChangelogError):
    """A changelog file could not be decoded; names the file and byte offset."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        where = f" (file {path!r}" if path is not None else ""
        if offset is not None:
            where += f" at offset {offset}" if where else f" (offset {offset}"
        if where:
            where += ")"
        super().__init__(message + where)
        self.path = path
        self.offset = offset


class BadMagicError(FormatError):
    """The file does not start with the changelog magic bytes."""


class UnsupportedVersionError(FormatError):
    """The file was written by a newer (or unknown) format version."""


class TruncatedFileError(FormatError):
    """The file ends before a frame, header or footer is complete."""


class ChecksumMismatchError(FormatError):
    """A CRC did not match: the bytes were altered."""


class HandleError(ChangelogError, ValueError):
    """A handle could not be built, combined or deserialized."""
