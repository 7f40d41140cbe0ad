"""Position: where a store instance stands in its lineage."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.backend.lineage.store_commit import Lineage
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle


@dataclass(frozen=True)
class Position:
    """A version, the snapshot below it and the durable changes since that snapshot."""

    version: int
    unique_id: str | None  # None only for the empty version 0
    materialized: MaterializedHandle | None
    lineage: Lineage  # (version, unique id) in (materialized.version, version]
    handle: ChangelogHandle  # durable changes in [materialized.sqn, next SQN)

    @classmethod
    def empty(cls, store_id: str) -> Position:
        return cls(0, None, None, (), ChangelogHandle.empty(store_id, 0))

    def on_snapshot(self, snapshot: MaterializedHandle) -> Position:
        """The same version built on `snapshot` (one of this lineage): FLIP-158 truncation.

        Only the changes the snapshot holds are dropped: a snapshot of an older version (one
        that finished uploading after later commits) keeps the changes of those commits.
        """
        return Position(self.version, self.unique_id, snapshot,
                        tuple(entry for entry in self.lineage if entry[0] > snapshot.version),
                        self.handle.slice(snapshot.sqn))

    def after_commit(self, version: int, unique_id: str,
                     persisted: ChangelogHandle) -> Position:
        return Position(version, unique_id, self.materialized,
                        (*self.lineage, (version, unique_id)), self.handle.combine(persisted))
