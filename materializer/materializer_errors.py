"""Exceptions of the materializer; everything raised here derives from MaterializerError.

MaterializerError sits under the library's one root, DstlError; storage failures from the
changelog package are chained as `__cause__`.
"""

from __future__ import annotations

from pyspark_dstl.core.errors import DstlError


class MaterializerError(DstlError):
    """Root of every error the materializer package raises."""


class SnapshotRequestError(MaterializerError, ValueError):
    """A materializer argument (store id, unique id, directory) is invalid."""


class StoreNotRegisteredError(MaterializerError, KeyError):
    """The store id was never registered (or was unregistered)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "store not registered"


class MaterializerClosedError(MaterializerError):
    """The materializer was closed."""


class ManifestError(MaterializerError):
    """A snapshot manifest is unreadable: bad magic, unknown version, CRC or body; names it."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message + (f" (manifest {path!r})" if path else ""))
        self.path = path


class ManifestExistsError(MaterializerError):
    """A different manifest already holds this (version, unique id)."""


class SnapshotNotFoundError(MaterializerError):
    """The manifest to restore does not exist."""


class SnapshotCorruptError(MaterializerError):
    """A snapshot file's size or checksum does not match its manifest; names the file."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SnapshotUploadError(MaterializerError):
    """A snapshot could not be uploaded; names the store and file, chains the cause."""


class MaterializationFailedError(MaterializerError):
    """More consecutive snapshot failures of one store than allowed; chains the last cause."""

    def __init__(self, store_id: str, failures: int, cause: BaseException | None) -> None:
        super().__init__(
            f"materialization of store {store_id!r} failed {failures} times in a row; "
            f"last cause: {cause!r}"
        )
        self.store_id = store_id
        self.failures = failures
        self.__cause__ = cause
