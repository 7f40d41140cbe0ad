"""StoreCommit: exactly what one store's commit contributes to a checkpoint.

The changelog handle covers the durable changes after the last materialized snapshot; the
lineage lists every (version, unique id) in (materialized.version, version], so a loader can
check the version markers inside the replayed data against it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.lineage.naming import check_unique_id, check_version, split_store_id
from pyspark_dstl.changelog.changelog_errors import HandleError
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from pyspark_dstl.core.errors import excerpt
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle
from pyspark_dstl.materializer.materializer_errors import MaterializerError

INFO_FORMAT_VERSION = 1

Lineage = tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class StoreCommit:
    store_id: str
    version: int
    unique_id: str
    base_unique_id: str | None
    changelog: ChangelogHandle
    materialized: MaterializedHandle | None
    lineage: Lineage
    pending_snapshot: tuple[int, str] | None = None

    def __post_init__(self) -> None:
        where = f"checkpoint info of store {self.store_id!r} version {self.version}"
        split_store_id(self.store_id)
        check_version(self.version)
        check_unique_id(self.unique_id)
        if self.version < 1:
            raise CorruptCheckpointError(f"{where}: committed versions start at 1")
        first = self.materialized.version + 1 if self.materialized is not None else 1
        expected = list(range(first, self.version + 1))
        if [v for v, _ in self.lineage] != expected:
            raise CorruptCheckpointError(f"{where}: lineage versions "
                                         f"{[v for v, _ in self.lineage]} should be {expected}")
        if self.lineage and self.lineage[-1][1] != self.unique_id:
            raise CorruptCheckpointError(f"{where}: lineage ends with {self.lineage[-1]}, "
                                         f"not ({self.version}, {self.unique_id!r})")
        if self.materialized is not None:
            if self.materialized.store_id != self.store_id:
                raise CorruptCheckpointError(f"{where}: snapshot belongs to store "
                                             f"{self.materialized.store_id!r}")
            if not self.lineage and self.materialized.unique_id != self.unique_id:
                raise CorruptCheckpointError(f"{where}: snapshot of the same version has "
                                             f"unique id {self.materialized.unique_id!r}")
        if self.changelog.log_id != self.store_id:
            raise CorruptCheckpointError(f"{where}: changelog handle is of log "
                                         f"{self.changelog.log_id!r}")

    @property
    def snapshot_sqn(self) -> int:
        """The first SQN not in the snapshot (where the changelog handle starts)."""
        return self.materialized.sqn if self.materialized is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form; `from_dict` reads it back."""
        return {
            "format_version": INFO_FORMAT_VERSION,
            "store_id": self.store_id,
            "version": self.version,
            "unique_id": self.unique_id,
            "base_unique_id": self.base_unique_id,
            "changelog": self.changelog.to_dict(),
            "materialized": self.materialized.to_dict() if self.materialized else None,
            "lineage": [[v, uid] for v, uid in self.lineage],
            "pending_snapshot": list(self.pending_snapshot) if self.pending_snapshot else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreCommit:
        if not isinstance(data, Mapping):
            raise CorruptCheckpointError(f"checkpoint info is not a mapping: {excerpt(data)}")
        version = data.get("format_version")
        if version != INFO_FORMAT_VERSION:
            raise CorruptCheckpointError(f"unsupported checkpoint info format version "
                                         f"{version!r} (this library reads "
                                         f"{INFO_FORMAT_VERSION})")
        try:
            materialized = data["materialized"]
            pending = data.get("pending_snapshot")
            return cls(
                store_id=str(data["store_id"]),
                version=_int(data["version"]),
                unique_id=str(data["unique_id"]),
                base_unique_id=(None if data["base_unique_id"] is None
                                else str(data["base_unique_id"])),
                changelog=ChangelogHandle.from_dict(data["changelog"]),
                materialized=(MaterializedHandle.from_dict(materialized)
                              if materialized is not None else None),
                lineage=tuple((_int(v), str(uid)) for v, uid in data["lineage"]),
                pending_snapshot=(_int(pending[0]), str(pending[1])) if pending else None,
            )
        except (KeyError, TypeError, ValueError, HandleError, MaterializerError) as exc:
            store = excerpt(data.get("store_id"))
            raise CorruptCheckpointError(f"invalid checkpoint info of store {store}: "
                                         f"{excerpt(exc)}") from exc


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {excerpt(value)}")
    return value
