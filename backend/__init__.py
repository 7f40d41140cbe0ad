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

from pyspark_dstl.core.lazy_names import by_module, load_lazy_name

_NAMES = by_module({
    "pyspark_dstl.backend.backend_errors": (
        "BackendError", "CommitLogCorruptError", "CommitLogError", "CorruptCheckpointError",
        "LineageError", "ProviderError", "StateStoreClosedError", "StoreIdError", "StoreLockedError"
    ),
    "pyspark_dstl.backend.backend_settings": ("BackendSettings",),
    "pyspark_dstl.backend.lineage.commit_entry": ("CommitEntry", "OperatorCommit"),
    "pyspark_dstl.backend.lineage.commit_log": ("CommitLog",),
    "pyspark_dstl.backend.lineage.store_commit": ("StoreCommit",),
    "pyspark_dstl.backend.ops.cleanup": ("cleanup_checkpoint", "CleanupReport"),
    "pyspark_dstl.backend.store.api": ("StateStore", "StateStoreProvider"),
    "pyspark_dstl.backend.store.registry": ("load_provider_class",),
    "pyspark_dstl.backend.store.state_backend": ("StateBackend",),
})


def __getattr__(name: str) -> Any:
    return load_lazy_name(__name__, _NAMES, name)


__all__ = sorted(_NAMES)
