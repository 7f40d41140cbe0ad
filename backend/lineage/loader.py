"""StoreLoader: rebuild a store instance's engine and position from checkpoint files.

Three sources: nothing (version 0), a StoreCommit (restore its snapshot, replay its
changelog handle), or only (version, unique id) (resolver.py finds the snapshot and the
changelog files from the store's own files). Every replay checks the version markers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark_dstl.backend.backend_errors import CorruptCheckpointError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.position import Position
from pyspark_dstl.backend.lineage.replay import (
    ChangelogReads,
    ReplayStats,
    replay_files,
    replay_handle,
)
from pyspark_dstl.backend.lineage.resolver import plan_replay
from pyspark_dstl.backend.lineage.rules import MarkerCheck
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.materializer.manifest import SnapshotManifest
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle
from pyspark_dstl.materializer.materializer_errors import MaterializerError

DB_DIR = "db"
EmptyEngine = Callable[[str], Engine]  # instance dir -> engine
SnapshotEngine = Callable[[str, str], Engine]  # restored db path, instance dir -> engine


@dataclass
class Loaded:
    engine: Engine
    position: Position
    kind: str  # "empty", "restore" (from a StoreCommit) or "restore_from_files"
    stats: ReplayStats
    snapshot_seconds: float = 0.0
    replay_seconds: float = 0.0


class StoreLoader:
    def __init__(self, context: LocationContext, store_id: str, empty_engine: EmptyEngine,
                 snapshot_engine: SnapshotEngine) -> None:
        self._context = context
        self._store_id = store_id
        self._empty_engine = empty_engine
        self._snapshot_engine = snapshot_engine

    def load(self, instance_dir: str, version: int, unique_id: str | None,
             info: StoreCommit | None) -> Loaded:
        if unique_id is None:
            return Loaded(self._empty_engine(instance_dir), Position.empty(self._store_id),
                          "empty", ReplayStats())
        if info is not None:
            return self._from_info(instance_dir, info)
        return self._from_files(instance_dir, version, unique_id)

    def _from_info(self, instance_dir: str, info: StoreCommit) -> Loaded:
        started = time.monotonic()
        materialized = info.materialized
        # the changelog's first group downloads while the snapshot is restored
        with ChangelogReads(self._context.storage, self._store_id, info.changelog) as reads:
            if materialized is not None:
                engine, _ = self._restore_snapshot(instance_dir, materialized.manifest_path,
                                                   materialized.version, materialized.unique_id)
                base: tuple[int, str | None] = (materialized.version, materialized.unique_id)
            else:
                engine, base = self._empty_engine(instance_dir), (0, None)
            restored = time.monotonic()
            try:
                check = MarkerCheck(self._store_id, base, info.lineage)
                stats = replay_handle(reads, engine, check)
            except BaseException:
                engine.close()
                raise
        position = Position(info.version, info.unique_id, materialized, info.lineage,
                            info.changelog)
        return Loaded(engine, position, "restore", stats, restored - started,
                      time.monotonic() - restored)

    def _from_files(self, instance_dir: str, version: int, unique_id: str) -> Loaded:
        started = time.monotonic()
        storage = self._context.storage
        plan = plan_replay(storage, self._store_id, version, unique_id)
        materialized: MaterializedHandle | None = None
        if plan.snapshot is not None:
            snapshot_version, snapshot_id, manifest_path = plan.snapshot
            engine, manifest = self._restore_snapshot(instance_dir, manifest_path,
                                                      snapshot_version, snapshot_id)
            materialized = MaterializedHandle(
                self._store_id, manifest.version, manifest.unique_id, manifest.sqn,
                manifest_path, manifest.total_bytes, 0, len(manifest.files))
        else:
            engine = self._empty_engine(instance_dir)
        restored = time.monotonic()
        try:
            check = MarkerCheck(self._store_id, plan.base, [(v, u) for v, u, _ in plan.steps])
            handle, stats = replay_files(storage, self._store_id, plan,
                                         materialized.sqn if materialized else 0, engine, check)
        except BaseException:
            engine.close()
            raise
        lineage = tuple((v, u) for v, u, _ in plan.steps)
        position = Position(version, unique_id, materialized, lineage, handle)
        return Loaded(engine, position, "restore_from_files", stats, restored - started,
                      time.monotonic() - restored)

    def _restore_snapshot(self, instance_dir: str, manifest_path: str, version: int,
                          unique_id: str) -> tuple[Engine, SnapshotManifest]:
        try:
            restored = self._context.materializer.restore(
                self._store_id, manifest_path, os.path.join(instance_dir, DB_DIR))
        except MaterializerError as exc:
            raise CorruptCheckpointError(f"store {self._store_id!r}: cannot restore snapshot "
                                         f"{manifest_path!r}: {exc}") from exc
        manifest = restored.manifest
        if (manifest.version, manifest.unique_id) != (version, unique_id):
            raise CorruptCheckpointError(
                f"store {self._store_id!r}: snapshot manifest {manifest_path!r} is of version "
                f"{manifest.version} id {manifest.unique_id!r}, expected version {version} id "
                f"{unique_id!r}")
        return self._snapshot_engine(restored.db_path, instance_dir), manifest
