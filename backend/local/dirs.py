"""Local directories of stores: one per loaded instance, guarded by a per-store file lock.

Layout: f"{local_dir}/{root name}/{operator}/{partition}/{instance id}". The lock
(fcntl.flock on f"{store dir}/.lock") keeps two processes on one host from using the same
store's directories at once; whoever holds it removes instance directories left behind.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time

from pyspark_dstl.backend.backend_errors import StoreLockedError
from pyspark_dstl.backend.lineage.naming import split_store_id
from pyspark_dstl.materializer.names import local_dir_name

LOCK_NAME = ".lock"
_POLL_SECONDS = 0.01  # the longest wait between two tries of a held lock
_FIRST_POLL_SECONDS = 0.001  # the first: a hand-off between processes takes milliseconds


def location_dir(local_dir: str, location: str) -> str:
    """The local directory of one checkpoint location (a readable, collision-free name)."""
    return os.path.join(os.path.abspath(local_dir), local_dir_name(location))


class StoreDirLock:
    """An exclusive flock on the store's local directory, held until release()."""

    def __init__(self, root: str, store_id: str) -> None:
        operator, partition = split_store_id(store_id)
        self.path = os.path.join(root, operator, str(partition))
        self._store_id = store_id
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float) -> None:
        if self._fd is not None:
            return
        os.makedirs(self.path, exist_ok=True)
        fd = os.open(os.path.join(self.path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        pause = _FIRST_POLL_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreLockedError(
                        f"store {self._store_id!r}: local directory {self.path!r} is locked by "
                        f"another process (waited {timeout:.1f} s)") from None
                time.sleep(pause)
                pause = min(pause * 1.5, _POLL_SECONDS)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def instance_dir(self, instance_id: str) -> str:
        return os.path.join(self.path, instance_id)

    def remove_other_instances(self, keep: str | None) -> list[str]:
        """Delete every instance directory except `keep`; only while holding the lock."""
        if self._fd is None:
            raise StoreLockedError(f"store {self._store_id!r}: lock not held")
        removed = []
        for name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, name)
            if name != LOCK_NAME and name != keep and os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
                removed.append(full)
        return removed
