"""ChangelogProvider: loads a store at a (version, unique id), reusing the open copy if it can.

Loading order: the open instance when it is at exactly that version and id and clean (no I/O);
otherwise a directory another process of the host released at exactly that version and id
(release_marker.py; no remote I/O either); otherwise a fresh instance directory, restored from
the StoreCommit (snapshot + changelog handle) or, given only the id, from the store's own
files (see resolver.py). Subclasses choose the engine.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

from pyspark_dstl.backend.backend_errors import ProviderError, StateStoreClosedError, StoreIdError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.loader import StoreLoader
from pyspark_dstl.backend.lineage.naming import (
    check_unique_id,
    check_version,
    new_unique_id,
    split_store_id,
    store_dir,
)
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.local.dirs import StoreDirLock
from pyspark_dstl.backend.store.api import StateStoreProvider
from pyspark_dstl.backend.store.instance import StoreInstance
from pyspark_dstl.backend.store.state_store import ChangelogStateStore
from pyspark_dstl.backend.store.takeover import LOAD_METRICS as LOCAL_REUSE_METRICS
from pyspark_dstl.backend.store.takeover import take_over

STORES_DIR = "stores"


class ChangelogProvider(StateStoreProvider):
    """One store of one checkpoint location. Not thread-safe: one task uses it at a time."""

    def __init__(self, context: LocationContext, store_id: str) -> None:
        split_store_id(store_id)
        self._context = context
        self._store_id = store_id
        self._lock = StoreDirLock(os.path.join(context.local_root, STORES_DIR), store_id)
        self._loader = StoreLoader(context, store_id, self._empty_engine,
                                   self._engine_from_snapshot)
        self._instance: StoreInstance | None = None
        self._open_store: ChangelogStateStore | None = None
        self._registered = False
        self._closed = False
        self._mutex = threading.Lock()

    @property
    def store_id(self) -> str:
        return self._store_id

    # --- engines (the only difference between providers) ------------------------------------

    @abstractmethod
    def _empty_engine(self, instance_dir: str) -> Engine: ...

    @abstractmethod
    def _engine_from_snapshot(self, db_path: str, instance_dir: str) -> Engine:
        """An engine holding the RocksDB restored at `db_path` (inside instance_dir)."""

    def _reopen_engine(self, instance_dir: str) -> Engine | None:
        """The engine of a directory another process released; None: not supported."""
        return None

    def _engine_dir(self, instance_dir: str) -> str | None:
        """Where _empty_engine opens an existing RocksDB of instance_dir (a copy of another
        store's, put there first); None: the engine cannot start from one."""
        return None

    # --- the API --------------------------------------------------------------------------------

    def get_store(self, version: int,
                  unique_id: str | StoreCommit | None = None) -> ChangelogStateStore:
        return self._open(version, unique_id, None)

    def get_empty_store_after(self, version: int) -> ChangelogStateStore:
        """An empty store whose commit is version `version + 1`, built on nothing: a state
        partition's first checkpoint in a new layout (a rescale). Its versions continue those
        the store's directory already holds, so retention and cleanup order them as usual."""
        check_version(version)
        return self._open(0, None, version)

    def get_store_from_copy_after(self, version: int,
                                  source: ChangelogStateStore) -> ChangelogStateStore:
        """get_empty_store_after(), but the engine starts as a RocksDB checkpoint (hard
        links) of `source`'s, an open store of another provider: a rescale clips it to the
        new partition's key groups. It commits as a snapshot alone, like an ingest."""
        check_version(version)
        store = self._open(0, None, version, source.checkpoint_engine)
        store._started_from_copy()
        return store

    def _open(self, version: int, unique_id: str | StoreCommit | None,
              empty_after: int | None,
              seed: Callable[[str], None] | None = None) -> ChangelogStateStore:
        with self._mutex:
            if self._closed:
                raise StateStoreClosedError(f"provider of store {self._store_id!r} is closed")
            info, uid = self._target(version, unique_id)
            if self._open_store is not None:
                self._open_store.abort()
            started = time.monotonic()
            load: dict[str, Any]
            if empty_after is None and self._instance is not None and \
                    self._instance.matches(version, uid):
                load = {"load_kind": "reuse"}
            else:
                load = self._load(version, uid, info, seed)
            load["load_seconds"] = time.monotonic() - started
            instance = self._instance
            assert instance is not None
            if empty_after is not None:
                instance.position = dataclasses.replace(instance.position, version=empty_after)
            marker = instance.begin(new_unique_id())
            store = ChangelogStateStore(instance, marker, load, self._store_ended)
            self._open_store = store
            return store

    def do_maintenance(self) -> None:
        """Forget a snapshot that failed; adopting a finished one happens at commit."""
        instance = self._instance
        if instance is not None:
            instance.snapshots.drop_failed()

    def wait_for_snapshot(self, timeout: float | None = None) -> bool:
        """Block until the open instance's snapshot in flight is done, so the next commit
        adopts it (orderly shutdown, tests); False when `timeout` ran out first."""
        instance = self._instance
        return instance is None or instance.snapshots.wait(timeout)

    def close(self) -> None:
        """Release the store: a clean instance stays on disk, marked, for the next process of
        the host that loads its exact version; everything else local is removed."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if self._open_store is not None:
                self._open_store.abort()
            instance, self._instance = self._instance, None
            kept = None
            try:
                if instance is not None and instance.release():
                    kept = os.path.basename(instance.instance_dir)
            finally:
                if self._registered:
                    self._context.materializer.unregister(self._store_id)
                if self._lock.held:
                    self._lock.remove_other_instances(keep=kept)
                    self._lock.release()

    # --- loading --------------------------------------------------------------------------------

    def _target(self, version: int, unique_id: str | StoreCommit | None,
                ) -> tuple[StoreCommit | None, str | None]:
        check_version(version)
        if isinstance(unique_id, StoreCommit):
            info = unique_id
            if info.store_id != self._store_id or info.version != version:
                raise StoreIdError(f"store {self._store_id!r}: asked for version {version} "
                                   f"with the checkpoint info of store {info.store_id!r} "
                                   f"version {info.version}")
            return info, info.unique_id
        if unique_id is None:
            if version != 0:
                raise StoreIdError(f"store {self._store_id!r}: version {version} needs a "
                                   f"unique id or checkpoint info (only version 0 has none)")
            return None, None
        if version == 0:
            raise StoreIdError(f"store {self._store_id!r}: version 0 is the empty store and "
                               f"has no unique id (got {unique_id!r})")
        return None, check_unique_id(unique_id)

    def _load(self, version: int, unique_id: str | None, info: StoreCommit | None,
              seed: Callable[[str], None] | None = None) -> dict[str, Any]:
        """A released directory at exactly this version taken over, or else a fresh
        instance directory (older ones removed) restored from the checkpoint; new writer."""
        context = self._context
        self._lock.acquire(context.settings.lock_timeout)
        if not self._registered:
            context.materializer.register(self._store_id, store_dir(self._store_id))
            self._registered = True
        self._drop_instance()
        if unique_id is not None:
            self._instance = take_over(context, self._store_id, self._lock, version,
                                       unique_id, info, self._reopen_engine)
            if self._instance is not None:
                return dict(LOCAL_REUSE_METRICS)
        self._lock.remove_other_instances(keep=None)
        instance_dir = self._lock.instance_dir(new_unique_id())
        os.makedirs(instance_dir)
        try:
            if seed is not None:
                self._seed(instance_dir, seed)
            loaded = self._loader.load(instance_dir, version, unique_id, info)
        except BaseException:
            self._lock.remove_other_instances(keep=None)
            raise
        try:
            writer = context.storage.create_writer(self._store_id,
                                                   directory=store_dir(self._store_id),
                                                   initial_sqn=loaded.position.handle.to_sqn)
        except BaseException:
            loaded.engine.close()
            self._lock.remove_other_instances(keep=None)
            raise
        base_id = info.base_unique_id if info is not None else None
        self._instance = StoreInstance(context, self._store_id, instance_dir, loaded.engine,
                                       writer, loaded.position, base_id,
                                       info.pending_snapshot if info is not None else None)
        stats = loaded.stats
        return {"load_kind": loaded.kind, "snapshot_restore_seconds": loaded.snapshot_seconds,
                "replay_seconds": loaded.replay_seconds,
                "replayed_change_sets": stats.change_sets, "replayed_records": stats.records,
                "replayed_files": stats.files, "replayed_bytes": stats.bytes,
                "replay_read_wait_seconds": stats.read_wait_seconds,
                "replay_decode_seconds": stats.decode_seconds,
                "replay_coalesce_seconds": stats.coalesce_seconds,
                "replay_apply_seconds": stats.apply_seconds,
                "replay_apply_wait_seconds": stats.apply_wait_seconds}

    def _seed(self, instance_dir: str, seed: Callable[[str], None]) -> None:
        engine_dir = self._engine_dir(instance_dir)
        if engine_dir is None:
            raise ProviderError(f"store {self._store_id!r}: provider {type(self).__name__} "
                                f"cannot start a store from a copy of another's RocksDB; use "
                                f"the RocksDB provider")
        seed(engine_dir)

    def _drop_instance(self) -> None:
        instance, self._instance = self._instance, None
        if instance is not None:
            instance.close()

    def _store_ended(self, store: ChangelogStateStore) -> None:
        if self._open_store is store:
            self._open_store = None
