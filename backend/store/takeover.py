"""Taking over a store directory that another process of the host released, with no remote I/O.

Only a directory whose release marker names exactly the requested (version, unique id) is
taken, and only when the shipped StoreCommit (if any) describes the same state; the marker
is deleted before the DB is opened for writing. Anything else returns None: the caller
restores from the checkpoint and removes the stale directories.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.lineage.context import LocationContext
from pyspark_dstl.backend.lineage.naming import store_dir
from pyspark_dstl.backend.lineage.position import Position
from pyspark_dstl.backend.lineage.store_commit import StoreCommit
from pyspark_dstl.backend.local.dirs import StoreDirLock
from pyspark_dstl.backend.local.release_marker import find_released, remove_marker, same_checkpoint
from pyspark_dstl.backend.store.instance import StoreInstance

log = logging.getLogger(__name__)
LOAD_METRICS: dict[str, Any] = {
    "load_kind": "local_reuse", "snapshot_restore_seconds": 0.0, "replay_seconds": 0.0,
    "replayed_change_sets": 0, "replayed_records": 0, "replayed_files": 0, "replayed_bytes": 0,
}


def take_over(context: LocationContext, store_id: str, lock: StoreDirLock, version: int,
              unique_id: str, info: StoreCommit | None,
              reopen: Callable[[str], Engine | None]) -> StoreInstance | None:
    """An instance on the directory released at (version, unique id); call with the lock held.

    The shipped `info` wins over the marker's (they must agree); the writer continues the
    store's SQNs where that info's changelog handle ends.
    """
    found = find_released(lock.path, version, unique_id)
    if found is None:
        return None
    instance_dir, marked = found
    if info is not None and not same_checkpoint(info, marked):
        log.warning("store %r: released directory %r disagrees with the checkpoint info of "
                    "version %d; restoring instead", store_id, instance_dir, version)
        return None
    chosen = info if info is not None else marked
    remove_marker(instance_dir)  # before opening for writing: a crash leaves no claim
    lock.remove_other_instances(keep=os.path.basename(instance_dir))
    try:
        engine = reopen(instance_dir)
    except BackendError as exc:
        log.warning("store %r: released directory %r cannot be opened, restoring instead: %s",
                    store_id, instance_dir, exc)
        return None
    if engine is None:
        return None
    try:
        writer = context.storage.create_writer(store_id, directory=store_dir(store_id),
                                               initial_sqn=chosen.changelog.to_sqn)
    except BaseException:
        engine.close()
        raise
    position = Position(chosen.version, chosen.unique_id, chosen.materialized, chosen.lineage,
                        chosen.changelog)
    return StoreInstance(context, store_id, instance_dir, engine, writer, position,
                         chosen.base_unique_id, chosen.pending_snapshot)
