"""Handles: where exactly one log's change sets in [from_sqn, to_sqn) are stored."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.changelog.changelog_errors import HandleError
from pyspark_dstl.core.errors import excerpt

HANDLE_FORMAT_VERSION = 1


@dataclass(frozen=True, order=True)
class Segment:
    """A byte range of one file holding consecutive change sets of one log.

    `path` is relative to the storage root, so a handle stays valid when the root moves.
    """

    from_sqn: int
    to_sqn: int
    path: str
    offset: int
    length: int
    key_groups: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.to_sqn <= self.from_sqn:
            raise HandleError(f"segment of {self.path!r} has empty SQN range "
                              f"[{self.from_sqn}, {self.to_sqn})")
        if self.offset < 0 or self.length <= 0:
            raise HandleError(f"segment of {self.path!r} has bad range "
                              f"offset={self.offset} length={self.length}")

    def adjoins(self, other: Segment) -> bool:
        """True when `other` continues this segment in the same file, bytes and SQNs."""
        return (
            other.path == self.path
            and other.offset == self.offset + self.length
            and other.from_sqn == self.to_sqn
        )

    def merged(self, other: Segment) -> Segment:
        return Segment(
            from_sqn=self.from_sqn,
            to_sqn=other.to_sqn,
            path=self.path,
            offset=self.offset,
            length=self.length + other.length,
            key_groups=tuple(sorted(set(self.key_groups) | set(other.key_groups))),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "from_sqn": self.from_sqn,
            "to_sqn": self.to_sqn,
            "path": self.path,
            "offset": self.offset,
            "length": self.length,
            "key_groups": list(self.key_groups),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Segment:
        try:
            return cls(
                from_sqn=int(data["from_sqn"]),
                to_sqn=int(data["to_sqn"]),
                path=str(data["path"]),
                offset=int(data["offset"]),
                length=int(data["length"]),
                key_groups=tuple(int(k) for k in data.get("key_groups", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise HandleError(f"invalid segment {excerpt(data)}: {excerpt(exc)}") from exc


def _merge_adjacent(segments: Iterable[Segment]) -> tuple[Segment, ...]:
    merged: list[Segment] = []
    for segment in sorted(segments):
        if merged and merged[-1].adjoins(segment):
            merged[-1] = merged[-1].merged(segment)
        else:
            merged.append(segment)
    return tuple(merged)


@dataclass(frozen=True)
class ChangelogHandle:
    """One log's durable change sets in [from_sqn, to_sqn), as ordered file segments.

    Segments that continue each other in one file are merged, so a handle grows with the
    number of uploads, not with the number of SQNs.
    """

    log_id: str
    from_sqn: int
    to_sqn: int
    segments: tuple[Segment, ...] = ()

    def __post_init__(self) -> None:
        if self.to_sqn < self.from_sqn:
            raise HandleError(f"handle of log {self.log_id!r}: to_sqn {self.to_sqn} "
                              f"< from_sqn {self.from_sqn}")
        for segment in self.segments:
            if segment.from_sqn < self.from_sqn or segment.to_sqn > self.to_sqn:
                raise HandleError(
                    f"handle of log {self.log_id!r} [{self.from_sqn}, {self.to_sqn}) holds "
                    f"segment [{segment.from_sqn}, {segment.to_sqn}) of {segment.path!r}"
                )
        for before, after in zip(self.segments, self.segments[1:], strict=False):
            if after.from_sqn < before.to_sqn:
                raise HandleError(f"handle of log {self.log_id!r} has overlapping segments "
                                  f"{before.path!r} and {after.path!r}")

    @classmethod
    def empty(cls, log_id: str, sqn: int) -> ChangelogHandle:
        return cls(log_id=log_id, from_sqn=sqn, to_sqn=sqn)

    @classmethod
    def of(cls, log_id: str, from_sqn: int, to_sqn: int,
           segments: Iterable[Segment]) -> ChangelogHandle:
        return cls(log_id, from_sqn, to_sqn, _merge_adjacent(segments))

    @property
    def size(self) -> int:
        return sum(segment.length for segment in self.segments)

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file the handle reads, each once, in order."""
        return tuple(dict.fromkeys(segment.path for segment in self.segments))

    def is_empty(self) -> bool:
        return not self.segments

    def combine(self, later: ChangelogHandle) -> ChangelogHandle:
        """The handle of [self.from_sqn, later.to_sqn); `later` must start where self ends."""
        if later.log_id != self.log_id:
            raise HandleError(f"cannot combine handles of logs {self.log_id!r} "
                              f"and {later.log_id!r}")
        if later.from_sqn != self.to_sqn:
            raise HandleError(f"cannot combine [{self.from_sqn}, {self.to_sqn}) with "
                              f"[{later.from_sqn}, {later.to_sqn}) of log {self.log_id!r}")
        return ChangelogHandle.of(self.log_id, self.from_sqn, later.to_sqn,
                                  self.segments + later.segments)

    def slice(self, from_sqn: int) -> ChangelogHandle:
        """The part of this handle at or after `from_sqn` (segments are not split)."""
        kept = [s for s in self.segments if s.to_sqn > from_sqn]
        if kept and kept[0].from_sqn < from_sqn:
            raise HandleError(f"SQN {from_sqn} falls inside segment "
                              f"[{kept[0].from_sqn}, {kept[0].to_sqn}) of {kept[0].path!r}")
        start = max(from_sqn, self.from_sqn)
        return ChangelogHandle(self.log_id, min(start, self.to_sqn), self.to_sqn, tuple(kept))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": HANDLE_FORMAT_VERSION,
            "log_id": self.log_id,
            "from_sqn": self.from_sqn,
            "to_sqn": self.to_sqn,
            "segments": [segment.to_dict() for segment in self.segments],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChangelogHandle:
        version = data.get("format_version")
        if version != HANDLE_FORMAT_VERSION:
            raise HandleError(f"unsupported changelog handle format version {version!r} "
                              f"(this library reads {HANDLE_FORMAT_VERSION})")
        try:
            return cls.of(
                str(data["log_id"]),
                int(data["from_sqn"]),
                int(data["to_sqn"]),
                [Segment.from_dict(s) for s in data["segments"]],
            )
        except (KeyError, TypeError) as exc:
            raise HandleError(f"invalid changelog handle: {exc}") from exc
