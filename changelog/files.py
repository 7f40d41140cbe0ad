"""Reading whole changelog files: a file's header (its logs' metadata), one log's change sets.

The restore paths that start from a directory instead of a handle (the lineage resolver, the
self-contained replay) ask here, so the byte layout stays in format.py and no caller outside
the changelog decodes a file itself. Handles are read by reader.py; this is for whole files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pyspark_dstl.changelog.changelog_errors import TruncatedFileError
from pyspark_dstl.changelog.changelog_handle import Segment
from pyspark_dstl.changelog.format import (
    ChangeSet,
    FileHeader,
    FileSummary,
    LogHeader,
    decode_header,
    read_file_located,
    verify_file,
)

HEADER_PROBE_BYTES = 64 * 1024
"""The first read of a header. Headers are usually a few hundred bytes; a longer one costs one
more request for the whole file."""

__all__ = [
    "HEADER_PROBE_BYTES",
    "ChangeSet",
    "FileHeader",
    "FileSummary",
    "LogHeader",
    "LogInFile",
    "ObjectSource",
    "read_file_header",
    "read_file_log",
    "verify_file",
]


class ObjectSource(Protocol):
    """Ranged reads of objects by path (ChangelogService fits: its reads are retried)."""

    def get(self, path: str, start: int = 0, end: int | None = None) -> bytes: ...


@dataclass(frozen=True)
class LogInFile:
    """One log's change sets from a changelog file whose every check passed.

    `located` pairs each change set, in file order (increasing SQN), with the segment holding
    it alone, so a handle of what was read can be built from it.
    """

    path: str
    file_size: int
    header: FileHeader
    located: tuple[tuple[Segment, ChangeSet], ...]


def read_file_header(source: ObjectSource, path: str) -> FileHeader:
    """The header of the changelog file at `path`, from its first bytes when they hold it.

    Raises FormatError (naming the file and offset) for a damaged header and the storage's
    errors (ObjectNotFoundError, ...) when the file cannot be read.
    """
    try:
        header, _ = decode_header(source.get(path, 0, HEADER_PROBE_BYTES), path)
    except TruncatedFileError:
        header, _ = decode_header(source.get(path), path)
    return header


def read_file_log(source: ObjectSource, path: str, log_id: str) -> LogInFile:
    """The change sets of `log_id` in the file at `path`, read whole and fully verified.

    Every checksum, the footer and the layout of all logs are checked before anything is
    returned (FormatError naming the file and offset otherwise). A log the file does not hold
    gives no change sets.
    """
    data = source.get(path)
    header, frames = read_file_located(data, path)
    located = tuple(
        (Segment(change_set.sqn, change_set.sqn + 1, path, offset, length,
                 change_set.key_groups), change_set)
        for offset, length, change_set in frames if change_set.log_id == log_id)
    return LogInFile(path, len(data), header, located)
