"""Small JSON records that say what they are and prove they are whole.

Commit entries, fences, epoch files and state schema records are each one JSON document:
a magic naming the kind, a format version, the body, and a SHA-256 of the body in canonical
form. A torn, foreign or edited file then fails by name instead of being read as something
else. Each kind keeps its own error class; this module only knows the document's shape.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark_dstl.core.errors import DstlError, excerpt

T = TypeVar("T")
# what building a record from a body of the wrong shape raises (a field missing, mistyped,
# out of range, or refused by the record's own checks)
_MALFORMED = (DstlError, KeyError, TypeError, ValueError, AttributeError, IndexError,
              RecursionError)


@dataclass(frozen=True)
class RecordKind:
    """How one kind of record is written and which error names a bad one."""

    description: str  # "commit log entry": line one of every error names it and the path
    magics: tuple[str, ...]  # accepted magics; the first is this kind's own
    body_field: str  # the document key holding the body ("entry", "body", "record")
    format_version: int  # the newest version this release writes and reads
    error: type[Exception]
    max_bytes: int | None = None  # larger files are refused before parsing
    first_version: int | None = None  # the oldest version read (default: format_version only)

    def encode(self, body: Mapping[str, Any], magic: str | None = None,
               version: int | None = None) -> bytes:
        """The document for `body` (under `magic`, by default this kind's own; as `version`,
        by default the newest): a record older releases can read is written in their
        version, one they must not read in a version they refuse."""
        chosen = magic if magic is not None else self.magics[0]
        if chosen not in self.magics:
            raise ValueError(f"magic {chosen!r} is not one of {sorted(self.magics)}")
        written = self.format_version if version is None else version
        if written not in self.versions:
            raise ValueError(f"format version {written} is not one of {list(self.versions)}")
        document = {"magic": chosen, "format_version": written,
                    "checksum": checksum(body), self.body_field: dict(body)}
        return json.dumps(document, sort_keys=True, indent=1).encode()

    def decode(self, data: bytes, path: str) -> tuple[str, dict[str, Any]]:
        """(magic, body) of a whole record of this kind; `error` naming `path` otherwise."""
        where = f"{self.description} {path!r}"
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise self.error(f"{where}: {len(data)} bytes, more than a record may hold "
                             f"({self.max_bytes}); the file is not one")
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise self.error(f"{where} is not JSON: {excerpt(exc)}") from exc
        magic = document.get("magic") if isinstance(document, dict) else None
        if not isinstance(magic, str) or magic not in self.magics:
            raise self.error(f"{where} lacks magic {self.magics[0]!r}")
        version = document.get("format_version")
        if isinstance(version, bool) or version not in self.versions:
            readable = ", ".join(str(v) for v in self.versions)
            raise self.error(f"{where} has unsupported format version {excerpt(version)}: "
                             f"this release reads {readable} (was it written by a newer "
                             f"release?)")
        body = document.get(self.body_field)
        if not isinstance(body, dict) or document.get("checksum") != checksum(body):
            raise self.error(f"{where} fails its checksum")
        return magic, body

    def decode_as(self, data: bytes, path: str, build: Callable[[str, dict[str, Any]], T]) -> T:
        """The record `build(magic, body)` makes of a whole record of this kind; a body it
        cannot make one of is `error` naming `path` too, like a damaged file."""
        magic, body = self.decode(data, path)
        try:
            return build(magic, body)
        except self.error:
            raise
        except _MALFORMED as exc:
            raise self.error(f"{self.description} {path!r} is malformed: "
                             f"{excerpt(exc)}") from exc

    @property
    def versions(self) -> range:
        """The format versions this release reads."""
        first = self.format_version if self.first_version is None else self.first_version
        return range(first, self.format_version + 1)


def checksum(body: Mapping[str, Any]) -> str:
    """SHA-256 of the body's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
