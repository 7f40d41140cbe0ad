"""The state store: providers and stores in Spark's shape, V2 lineage, commit, cleanup.

    from pyspark_dstl.backend import BackendSettings, StateBackend

    with StateBackend(BackendSettings()) as backend:
        store = backend.provider("file:///tmp/ckpt", "op", 0).get_store(0)
        store.put(b"k", b"v")
        info = store.commit()          # a StoreCommit: exactly what a checkpoint records

Streaming queries use `pyspark_dstl.spark` (or the `pyspark_dstl` facade). The names here
load on first use: importing the package imports none of its rooms.
"""

from __future__ import annotations

from typing import Any

from pyspark_dstl.core.lazy_names import load_lazy_name

_NAMES = {
    "BackendError": "pyspark_dstl.backend.backend_errors",
    "BackendSettings": "pyspark_dstl.backend.backend_settings",
    "cleanup_checkpoint": "pyspark_dstl.backend.ops.cleanup",
    "CleanupReport": "pyspark_dstl.backend.ops.cleanup",
    "CommitEntry": "pyspark_dstl.backend.lineage.commit_entry",
    "CommitLog": "pyspark_dstl.backend.lineage.commit_log",
    "CommitLogCorruptError": "pyspark_dstl.backend.backend_errors",
    "CommitLogError": "pyspark_dstl.backend.backend_errors",
    "CorruptCheckpointError": "pyspark_dstl.backend.backend_errors",
    "LineageError": "pyspark_dstl.backend.backend_errors",
    "load_provider_class": "pyspark_dstl.backend.store.registry",
    "OperatorCommit": "pyspark_dstl.backend.lineage.commit_entry",
    "ProviderError": "pyspark_dstl.backend.backend_errors",
    "StateBackend": "pyspark_dstl.backend.store.state_backend",
    "StateStore": "pyspark_dstl.backend.store.api",
    "StateStoreClosedError": "pyspark_dstl.backend.backend_errors",
    "StateStoreProvider": "pyspark_dstl.backend.store.api",
    "StoreCommit": "pyspark_dstl.backend.lineage.store_commit",
    "StoreIdError": "pyspark_dstl.backend.backend_errors",
    "StoreLockedError": "pyspark_dstl.backend.backend_errors",
}


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
