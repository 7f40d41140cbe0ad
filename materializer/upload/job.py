"""One snapshot's background part: upload, then settle the store's schedule and the future.

The schedule is updated before the future resolves, so a caller that sees the future done
also sees the result in `poll` and no snapshot in flight.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass

from pyspark_dstl.materializer.link_copy import LinkCopy
from pyspark_dstl.materializer.materialized_handle import MaterializedHandle, SnapshotRequest
from pyspark_dstl.materializer.materializer_errors import MaterializerError, SnapshotUploadError
from pyspark_dstl.materializer.metrics import Metrics
from pyspark_dstl.materializer.upload.schedule import StoreSchedule
from pyspark_dstl.materializer.upload.uploader import SnapshotUploader


@dataclass(frozen=True)
class SnapshotJob:
    uploader: SnapshotUploader
    schedule: StoreSchedule
    lock: threading.Lock
    metrics: Metrics
    link_copy: LinkCopy
    request: SnapshotRequest
    future: Future[MaterializedHandle]

    def __call__(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            self.link_copy.remove()
            with self.lock:
                self.schedule.abandoned(self.future)
            return
        try:
            handle = self.uploader.upload(self.link_copy, self.request,
                                          self.schedule.remote_dir)
        except BaseException as exc:
            self.link_copy.remove()
            self._fail(exc)
            return
        self.link_copy.remove()
        with self.lock:
            self.schedule.succeeded(self.future, handle)
        self.metrics.add("snapshots_succeeded")
        self.future.set_result(handle)

    def _fail(self, exc: BaseException) -> None:
        error = exc
        if not isinstance(exc, MaterializerError):
            error = SnapshotUploadError(
                f"snapshot {self.request.version}_{self.request.unique_id} of store "
                f"{self.request.store_id!r} failed: {exc!r}")
            error.__cause__ = exc
        with self.lock:
            self.schedule.failed(self.future, error)
        self.metrics.add("snapshots_failed")
        self.future.set_exception(error)
