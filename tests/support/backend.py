"""Helpers shared by the backend tests (no tests here): options, environments, a state model.

Fixtures are plain functions of pytest's tmp_path / s3 fixtures, so any test file can import
them; they build real backends on file:// or on the moto S3 server behind the fault proxy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pyspark_dstl.backend.backend_settings import BackendSettings, FencingSettings
from pyspark_dstl.backend.fencing.lease import CheckpointLease, acquire
from pyspark_dstl.backend.lineage.commit_log import CommitEntry, CommitLog, OperatorCommit
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.store.api import StateStore, StateStoreProvider
from pyspark_dstl.backend.store.state_backend import StateBackend
from pyspark_dstl.changelog.changelog_handle import ChangelogHandle, Segment
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings
from tests.support import S3Env

ROCKSDB = "pyspark_dstl.backend.store.rocksdb_provider.RocksDBChangelogProvider"
MEMORY = "pyspark_dstl.backend.store.memory_provider.InMemoryProvider"
PROVIDERS = [ROCKSDB, MEMORY]
PROVIDER_IDS = ["rocksdb", "memory"]
OPERATOR = "agg"

# no automatic snapshots unless a test asks; no 10 ms batching wait in tests
NO_SNAPSHOTS = MaterializerSettings(interval=None, every_n_commits=None,
                                   backstop_bytes=1 << 40, worker_threads=2)


@dataclass
class BackendEnv:
    """A checkpoint root plus everything needed to open backends on it and look inside."""

    url: str
    changelog: ChangelogSettings
    local_dir: str
    provider_class: str = ROCKSDB
    materialization: MaterializerSettings = NO_SNAPSHOTS
    file_root: Path | None = None  # set for file:// roots
    s3: S3Env | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    _backends: list[StateBackend] = field(default_factory=list)
    _storage: ChangelogService | None = None
    _lease: CheckpointLease | None = None

    def options(self, **changes: Any) -> BackendSettings:
        base = BackendSettings(provider_class=self.provider_class, local_dir=self.local_dir,
                              changelog=self.changelog, materialization=self.materialization,
                              lock_timeout=5.0, **self.extra)
        return base.with_changes(**changes)

    def backend(self, **changes: Any) -> StateBackend:
        """A new backend on the same root: think of another executor host, with its own
        local directory (unless `local_dir` is given)."""
        changes.setdefault("local_dir", os.path.join(self.local_dir, f"host{len(self._backends)}"))
        backend = StateBackend(self.options(**changes))
        self._backends.append(backend)
        return backend

    def provider(self, backend: StateBackend, partition: int = 0) -> StateStoreProvider:
        return backend.provider(self.url, OPERATOR, partition)

    @property
    def storage(self) -> ChangelogService:
        """A separate storage client for looking at and tampering with the root."""
        if self._storage is None:
            self._storage = ChangelogService(self.url, self.changelog)
        return self._storage

    def paths(self, prefix: str = "", epochs: bool = False) -> list[str]:
        """The root's files under `prefix`; the epoch files of the runs that held it (see
        lineage/fencing.py) only with `epochs`."""
        return sorted(info.path for info in self.storage.list(prefix)
                      if epochs or not info.path.startswith("epochs/"))

    def delete(self, path: str) -> None:
        self.storage.delete_many([path])

    def replace(self, path: str, data: bytes) -> None:
        """Overwrite behind the store's back (the library itself never overwrites)."""
        if self.s3 is not None:
            self.s3.direct_put(path, data)
        else:
            assert self.file_root is not None
            target = self.file_root / path
            os.chmod(target, 0o644)
            target.write_bytes(data)

    def lease(self) -> CheckpointLease:
        """The lease of "the driver" of this root (taken on first use, like a run would)."""
        if self._lease is None or self._lease.state != "held":
            self._lease = acquire(self.storage, FencingSettings())
        return self._lease

    def commit_log(self) -> CommitLog:
        """The commit log as the driver writes it (through its lease)."""
        return CommitLog(self.storage, lease=self.lease())

    def close(self) -> None:
        """Let go of the lease, the backends and the storage client; the env stays usable
        (what is used next is opened again)."""
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        for backend in self._backends:
            backend.close()
        self._backends.clear()
        if self._storage is not None:
            self._storage.close()
            self._storage = None


def file_env(tmp_path: Path, provider_class: str = ROCKSDB, **changes: Any) -> BackendEnv:
    root = tmp_path / "ckpt"
    return BackendEnv(url=root.as_uri(), changelog=ChangelogSettings(persist_delay=0.0),
                      local_dir=str(tmp_path / "local"), provider_class=provider_class,
                      file_root=root, **changes)


def s3_env(s3: S3Env, tmp_path: Path, provider_class: str = ROCKSDB,
           **changes: Any) -> BackendEnv:
    return BackendEnv(url=s3.url, changelog=s3.options.with_changes(persist_delay=0.0),
                      local_dir=str(tmp_path / "local"), provider_class=provider_class,
                      s3=s3, **changes)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[BackendEnv]:
    """A file:// root with the RocksDB provider."""
    made = file_env(tmp_path)
    yield made
    made.close()


def state_of(store: StateStore, cf: str = "default") -> dict[bytes, bytes]:
    return dict(store.iterator(cf))


def apply(store: StateStore, model: dict[bytes, bytes],
          changes: Mapping[bytes, bytes | None]) -> None:
    """Write `changes` (None = delete) to the store and to the model alike."""
    for key, value in changes.items():
        if value is None:
            store.remove(key)
            model.pop(key, None)
        else:
            store.put(key, value)
            model[key] = value


def entry_of(batch_id: int, *infos: Any, partitions: int = 1) -> CommitEntry:
    stores = {int(info.store_id.rsplit("/", 1)[1]): info for info in infos}
    return CommitEntry(batch_id, {OPERATOR: OperatorCommit(partitions, stores)})


def info_of(partition: int, version: int, unique_id: str) -> StoreCommit:
    """A store commit of operator "agg", partition `partition`, at `version`: one changelog
    segment, its lineage back to version 1 (commit-log tests)."""
    store_id = f"agg/{partition}"
    path = f"state/{store_id}/{version}_{unique_id}.changelog"
    handle = ChangelogHandle.of(store_id, 0, 1, [Segment(0, 1, path, 120, 40, (partition,))])
    return StoreCommit(store_id, version, unique_id, None if version == 1 else "base",
                          handle, None, tuple((v, unique_id if v == version else "base")
                                              for v in range(1, version + 1)))


def entry(batch_id: int, unique_id: str = "aaaa", **extra: str) -> CommitEntry:
    """Batch `batch_id`'s entry: operator "agg" over 2 partitions, both at version
    batch_id + 1."""
    stores = {p: info_of(p, batch_id + 1, unique_id) for p in (0, 1)}
    return CommitEntry(batch_id, {"agg": OperatorCommit(2, stores)}, extra=extra)
