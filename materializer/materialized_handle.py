"""What the owner asks to snapshot (SnapshotRequest) and what it gets back (MaterializedHandle)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from pyspark_dstl.materializer.materializer_errors import MaterializerError, SnapshotRequestError
from pyspark_dstl.materializer.names import check_unique_id

HANDLE_FORMAT_VERSION = 1


class HandleFormatError(MaterializerError, ValueError):
    """A serialized MaterializedHandle is invalid or of an unknown format version."""


@dataclass(frozen=True)
class SnapshotRequest:
    """A commit boundary to snapshot. `lineage` lists (version, unique_id) since the previous
    snapshot as the owner knows them; `metadata` holds owner extras (msgpack types only)."""

    store_id: str
    version: int
    unique_id: str
    sqn: int
    lineage: tuple[tuple[int, str], ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.store_id, str) or not self.store_id:
            raise SnapshotRequestError(f"invalid store id {self.store_id!r}")
        check_unique_id(self.unique_id)
        for name in ("version", "sqn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SnapshotRequestError(
                    f"snapshot of store {self.store_id!r}: {name} must be an integer >= 0, "
                    f"got {value!r}")
        lineage = tuple((int(v), str(u)) for v, u in self.lineage)
        object.__setattr__(self, "lineage", lineage)
        try:
            msgpack.packb(dict(self.metadata), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SnapshotRequestError(
                f"snapshot of store {self.store_id!r}: metadata is not msgpack-serializable: "
                f"{exc}") from exc


@dataclass(frozen=True)
class MaterializedHandle:
    """A completed snapshot: where its manifest is and how much it holds and cost to upload."""

    store_id: str
    version: int
    unique_id: str
    sqn: int
    manifest_path: str
    total_bytes: int
    incremental_bytes: int
    file_count: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": HANDLE_FORMAT_VERSION,
            "store_id": self.store_id,
            "version": self.version,
            "unique_id": self.unique_id,
            "sqn": self.sqn,
            "manifest_path": self.manifest_path,
            "total_bytes": self.total_bytes,
            "incremental_bytes": self.incremental_bytes,
            "file_count": self.file_count,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MaterializedHandle:
        version = data.get("format_version") if isinstance(data, Mapping) else None
        if version != HANDLE_FORMAT_VERSION:
            raise HandleFormatError(f"unsupported materialized handle format version "
                                    f"{version!r} (this library reads {HANDLE_FORMAT_VERSION})")
        try:
            return cls(
                store_id=_typed(data, "store_id", str),
                version=_typed(data, "version", int),
                unique_id=_typed(data, "unique_id", str),
                sqn=_typed(data, "sqn", int),
                manifest_path=_typed(data, "manifest_path", str),
                total_bytes=_typed(data, "total_bytes", int),
                incremental_bytes=_typed(data, "incremental_bytes", int),
                file_count=_typed(data, "file_count", int),
            )
        except KeyError as exc:
            raise HandleFormatError(f"materialized handle lacks field {exc}") from exc


def _typed(data: Mapping[str, Any], name: str, kind: type) -> Any:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise HandleFormatError(f"materialized handle field {name!r} must be "
                                f"{kind.__name__}, got {value!r}")
    return value
