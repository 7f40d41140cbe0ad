"""Is there a checkpoint at all? The tools refuse to call a missing or empty checkpoint
location clean."""

from __future__ import annotations

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.fencing.epochs import EPOCHS_PREFIX
from pyspark_dstl.backend.lineage.commit_log import COMMITS_PREFIX
from pyspark_dstl.backend.lineage.naming import STATE_PREFIX
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.changelog.storage.local import LocalStorage


class NoCheckpointError(BackendError):
    """The checkpoint location does not exist or holds no checkpoint file; names the location."""


def require_checkpoint(storage: ChangelogService) -> None:
    """NoCheckpointError unless the location holds a commit log entry, a store file or an epoch
    file (the cheap listings first: commits/, then epochs/, then state/)."""
    files = storage.storage
    if isinstance(files, LocalStorage) and not files.root.is_dir():
        raise NoCheckpointError(f"checkpoint {storage.url}: {str(files.root)!r} does not exist "
                                f"or is not a directory")
    for prefix in (COMMITS_PREFIX, EPOCHS_PREFIX, STATE_PREFIX):
        if storage.list(prefix + "/"):
            return
    raise NoCheckpointError(f"checkpoint {storage.url} holds no checkpoint: nothing under "
                            f"{COMMITS_PREFIX}/, {STATE_PREFIX}/ or {EPOCHS_PREFIX}/ (is the "
                            f"URL right?)")
