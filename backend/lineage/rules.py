"""Lineage rules: the header every changelog file carries, and the check of version markers.

A store's history must be linear: version v+1 was built on exactly (v, unique id of v). The
header lets a loader find the history from the files alone (V2's self-contained store
directory); the markers inside the data let it prove that what it replays is that history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError, LineageError
from pyspark_dstl.backend.engines.records import VersionMarker
from pyspark_dstl.backend.lineage.store_commit import Lineage
from pyspark_dstl.core.errors import excerpt


@dataclass(frozen=True)
class SnapshotRef:
    """The materialized snapshot a commit was built on."""

    version: int
    unique_id: str
    sqn: int
    manifest_path: str


@dataclass(frozen=True)
class FinalMark:
    """What the files of a commit's last upload carry: the SQNs of all the commit's change
    sets. An attempt is a completed commit when its files hold exactly these SQNs."""

    from_sqn: int
    to_sqn: int


EARLY = "early"
"""`HeaderMeta.completion` of a file uploaded before the commit's last upload."""
LEGACY = "legacy"
"""`HeaderMeta.completion` of a file written before completion marks existed."""


@dataclass(frozen=True)
class HeaderMeta:
    """Metadata of a commit's changelog files. `lineage` covers (snapshot.version, version).

    `completion` is a FinalMark in the files of the commit's last upload, EARLY in files
    uploaded before it (a large transaction's early uploads), LEGACY when the header has no
    "commit" key at all (written by a version without completion marks).
    """

    store_id: str
    version: int
    unique_id: str
    base_unique_id: str | None
    lineage: Lineage
    snapshot: SnapshotRef | None
    completion: FinalMark | str = EARLY

    @property
    def final(self) -> FinalMark | None:
        return self.completion if isinstance(self.completion, FinalMark) else None

    def to_dict(self) -> dict[str, Any]:
        snapshot = self.snapshot
        return {
            "store_id": self.store_id,
            "version": self.version,
            "unique_id": self.unique_id,
            "base_unique_id": self.base_unique_id,
            "lineage": [[v, uid] for v, uid in self.lineage],
            "snapshot": None if snapshot is None else {
                "version": snapshot.version, "unique_id": snapshot.unique_id,
                "sqn": snapshot.sqn, "manifest_path": snapshot.manifest_path},
            **_completion_dict(self.completion),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str) -> HeaderMeta:
        try:
            raw = data["snapshot"]
            snapshot = None if raw is None else SnapshotRef(
                int(raw["version"]), str(raw["unique_id"]), int(raw["sqn"]),
                str(raw["manifest_path"]))
            base = data["base_unique_id"]
            meta = cls(str(data["store_id"]), int(data["version"]), str(data["unique_id"]),
                       None if base is None else str(base),
                       tuple((int(v), str(uid)) for v, uid in data["lineage"]), snapshot,
                       _completion(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(f"changelog file {path!r}: header metadata is not a "
                                         f"commit header: {excerpt(exc)}") from exc
        meta.check(path)
        return meta

    @property
    def base(self) -> tuple[int, str | None]:
        """(version, unique id) this lineage starts from: the snapshot, or empty version 0."""
        if self.snapshot is None:
            return 0, None
        return self.snapshot.version, self.snapshot.unique_id

    def check(self, path: str) -> None:
        """The header must describe a consecutive history ending at version - 1."""
        start, start_uid = self.base
        versions = [v for v, _ in self.lineage]
        if versions != list(range(start + 1, self.version)):
            raise LineageError(f"store {self.store_id!r}: changelog file {path!r} of version "
                               f"{self.version} lists lineage versions {versions}, expected "
                               f"{start + 1}..{self.version - 1}")
        expected_base = self.lineage[-1][1] if self.lineage else start_uid
        if self.base_unique_id != expected_base:
            raise LineageError(f"store {self.store_id!r}: changelog file {path!r} of version "
                               f"{self.version} has base id {self.base_unique_id!r} but its "
                               f"lineage ends with {expected_base!r}")


def _completion_dict(completion: FinalMark | str) -> dict[str, Any]:
    if completion == LEGACY:
        return {}
    if isinstance(completion, FinalMark):
        return {"commit": {"from_sqn": completion.from_sqn, "to_sqn": completion.to_sqn}}
    return {"commit": None}


def _completion(data: Mapping[str, Any]) -> FinalMark | str:
    if "commit" not in data:
        return LEGACY
    raw = data["commit"]
    if raw is None:
        return EARLY
    mark = FinalMark(_int(raw["from_sqn"]), _int(raw["to_sqn"]))
    if not 0 <= mark.from_sqn < mark.to_sqn:
        raise ValueError(f"commit SQN range [{mark.from_sqn}, {mark.to_sqn}) is empty")
    return mark


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {excerpt(value)}")
    return value


class MarkerCheck:
    """Checks the version markers met during replay against the expected chain.

    `chain` lists (version, unique id) after `base`, in order. Several change sets may carry
    the same marker (one commit flushed more than once); each version must appear, in order.
    """

    def __init__(self, store_id: str, base: tuple[int, str | None],
                 chain: Sequence[tuple[int, str]]) -> None:
        self._store_id = store_id
        self._base = base
        self._chain = list(chain)
        self._index = -1
        versions = [v for v, _ in self._chain]
        if versions != list(range(base[0] + 1, base[0] + 1 + len(versions))):
            raise LineageError(f"store {store_id!r}: lineage versions {versions} do not "
                               f"follow version {base[0]} consecutively")

    def check(self, marker: VersionMarker, where: str) -> None:
        if self._index >= 0 and marker == self._marker(self._index):
            return
        following = self._index + 1
        if following >= len(self._chain):
            raise LineageError(f"store {self._store_id!r}: {where} holds changes of version "
                               f"{marker.version} ({marker.unique_id!r}) after the expected "
                               f"end {self._expected_end()}")
        expected = self._marker(following)
        if marker != expected:
            raise LineageError(
                f"store {self._store_id!r}: {where} holds changes of version {marker.version} "
                f"id {marker.unique_id!r} built on {marker.base_unique_id!r}; expected version "
                f"{expected.version} id {expected.unique_id!r} built on "
                f"{expected.base_unique_id!r}")
        self._index = following

    def finish(self, where: str) -> None:
        if self._index != len(self._chain) - 1:
            missing = self._chain[self._index + 1:]
            raise LineageError(f"store {self._store_id!r}: {where} lacks the changes of "
                               f"versions {[v for v, _ in missing]} (ids "
                               f"{[uid for _, uid in missing]})")

    def _marker(self, index: int) -> VersionMarker:
        version, unique_id = self._chain[index]
        base = self._chain[index - 1][1] if index > 0 else self._base[1]
        return VersionMarker(version, unique_id, base)

    def _expected_end(self) -> str:
        if not self._chain:
            return f"version {self._base[0]} (nothing to replay)"
        return f"version {self._chain[-1][0]} ({self._chain[-1][1]!r})"
