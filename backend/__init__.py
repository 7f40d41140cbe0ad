"""The state store: providers and stores in Spark's shape, V2 lineage, commit, cleanup.

    from pyspark_dstl.backend import BackendSettings, StateBackend

    with StateBackend(BackendSettings()) as backend:
        store = backend.provider("file:///tmp/ckpt", "op", 0).get_store(0)
        store.put(b"k", b"v")
        info = store.commit()          # a StoreCommit: exactly what a checkpoint records

Streaming queries use `pyspark_dstl.spark` (or the `pyspark_dstl` facade).
"""

from pyspark_dstl.backend.backend_errors import (
    BackendError,
    CommitLogCorruptError,
    CommitLogError,
    CorruptCheckpointError,
    LineageError,
    ProviderError,
    StateStoreClosedError,
    StoreIdError,
    StoreLockedError,
)
from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.lineage.commit_entry import CommitEntry, OperatorCommit
from pyspark_dstl.backend.lineage.commit_log import CommitLog
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.ops.cleanup import CleanupReport, cleanup_checkpoint
from pyspark_dstl.backend.store.api import StateStore, StateStoreProvider
from pyspark_dstl.backend.store.registry import load_provider_class
from pyspark_dstl.backend.store.state_backend import StateBackend

__all__ = [
    "BackendError",
    "BackendSettings",
    "CleanupReport",
    "CommitEntry",
    "CommitLog",
    "CommitLogCorruptError",
    "CommitLogError",
    "CorruptCheckpointError",
    "LineageError",
    "OperatorCommit",
    "ProviderError",
    "StateBackend",
    "StateStore",
    "StateStoreClosedError",
    "StateStoreProvider",
    "StoreCommit",
    "StoreIdError",
    "StoreLockedError",
    "cleanup_checkpoint",
    "load_provider_class",
]
