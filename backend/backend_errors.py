"""Exceptions of the backend; everything raised here derives from BackendError.

Errors from the changelog and materializer packages are chained as `__cause__` when the backend
turns them into one of these, so a caller can catch one root per package.
"""

from __future__ import annotations

from pyspark_dstl.core.errors import DstlError


class BackendError(DstlError):
    """Root of every error the backend package raises."""


class StoreIdError(BackendError, ValueError):
    """An operator name, partition or unique id cannot be used in a store path."""


class LineageError(BackendError):
    """The files of a store do not form the expected linear history; names store and version."""


class CorruptCheckpointError(BackendError):
    """A checkpoint file or record is unreadable or inconsistent; names the file."""


class SchemaRecordError(CorruptCheckpointError):
    """A state schema record cannot be listed or read, is damaged or foreign, or a record the
    committed state reads through is missing; names the file."""


class ProviderError(BackendError):
    """A provider class path cannot be loaded or is not a StateStoreProvider."""


class CommitLogError(BackendError):
    """A commit log entry cannot be written or read; names the entry."""


class CommitLogCorruptError(CommitLogError):
    """A commit log entry exists but fails its magic, version or checksum; names the entry."""


class StateStoreClosedError(BackendError):
    """The store (or its provider) was committed, aborted or closed and cannot be used."""


class StoreLockedError(BackendError):
    """Another process holds the local directory lock of the store."""


class UncommittedAttemptError(LineageError):
    """An attempt's files never completed a store commit (it aborted or crashed after early
    uploads): it is not a checkpoint; names the store, the attempt and its newest file."""


class CheckpointHeldError(BackendError):
    """Another run holds the checkpoint location; names the location and that run."""


class FencedError(BackendError):
    """This run no longer holds the checkpoint location (a newer run took it over); it must stop
    before it commits or deletes anything. Names the location, this run and the newer one."""
