"""EngineCatchUp: a commit's write to the local engine, applied after the commit returns.

A commit is complete once its changelog is durable: that is what a restore reads. The local
engine is a cache of the committed state that only has to hold a version before something
reads it. rocksdict holds the GIL for a whole WriteBatch, so a write made inside the commit
stalled the changelog upload's thread hand-offs and the checkpoint waited for both. Here the
commit hands its tables over once the changelog is durable and one thread per instance applies
them; whatever uses the engine next (the next transaction, a snapshot's RocksDB checkpoint, a
flush, close) waits for that write first. A write that failed is reported, never dropped: the
owner marks the instance dirty, so the next load restores the version from the checkpoint.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from pyspark_dstl.backend.backend_errors import BackendError
from pyspark_dstl.backend.engines.base import BlockWrite, Engine

log = logging.getLogger(__name__)


class EngineWriteError(BackendError):
    """The background write of a committed version to the local engine failed; names the
    store and the version (the changelog holds it: the instance must be reloaded)."""


class EngineCatchUp:
    """At most one write owed or running per instance; writes run in commit order because
    the owner waits for one (next transaction) before it can owe another."""

    def __init__(self, engine: Engine, store_id: str) -> None:
        self._engine = engine
        self._store_id = store_id
        self._executor: ThreadPoolExecutor | None = None
        self._owed: tuple[list[BlockWrite], int] | None = None  # held, not yet started
        self._pending: Future[None] | None = None  # done when the engine holds the write
        self._version = 0  # of the write owed or running
        self._failure: EngineWriteError | None = None
        self.writes = 0
        self.write_seconds = 0.0  # spent applying, on the background thread
        self.wait_seconds = 0.0  # callers spent waiting for a write to finish

    @property
    def pending(self) -> Future[None] | None:
        """Done once the engine holds every write handed over so far (None: nothing owed)."""
        return self._pending

    def hold(self, writes: list[BlockWrite], version: int) -> None:
        """Owe the tables of committed `version`; start() applies them. The previous write
        must be settled (wait()) first."""
        if self._owed is not None or (self._pending is not None and not self._pending.done()):
            raise BackendError(f"store {self._store_id!r}: version {version} handed to the "
                               f"engine before the previous write finished")
        self._owed = (writes, version)
        self._version = version
        self._pending = Future()

    def start(self) -> None:
        """Begin applying the owed write on the instance's writer thread (no-op if none)."""
        if self._owed is None:
            return
        tables, version = self._owed
        self._owed = None
        future = self._pending
        assert future is not None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"dstl-engine-{self._store_id}")
        try:
            self._executor.submit(self._apply, tables, version, future)
        except BaseException as exc:  # shut down: the write cannot run
            future.set_exception(exc)
            raise

    def _apply(self, tables: list[BlockWrite], version: int, future: Future[None]) -> None:
        began = time.monotonic()
        try:
            self._engine.apply_blocks(tables)
        except BaseException as exc:  # every failure reaches the owner through the future
            future.set_exception(exc)
            return
        finally:
            self.write_seconds += time.monotonic() - began
            self.writes += 1
        future.set_result(None)

    def wait(self) -> None:
        """Block until the engine holds every write handed over; EngineWriteError if one
        failed (again at every later call: the engine is behind the changelog for good)."""
        if self._failure is not None:
            raise self._failure
        self.start()
        future = self._pending
        if future is None:
            return
        if not future.done():
            began = time.monotonic()
            try:
                future.exception()  # waits without raising
            finally:
                self.wait_seconds += time.monotonic() - began
        self._pending = None
        error = future.exception()
        if error is not None:
            self._failure = EngineWriteError(
                f"store {self._store_id!r}: writing committed version {self._version} to the "
                f"local engine failed ({error!r}); the changelog holds it, the store is "
                f"reloaded from the checkpoint")
            self._failure.__cause__ = error
            raise self._failure

    def settled(self) -> bool:
        """wait(), reporting a failure as False (logged) instead of raising."""
        try:
            self.wait()
        except EngineWriteError as exc:
            log.error("%s", exc)
            return False
        return True

    def close(self) -> None:
        """Let a write in flight finish (its result is the owner's to read), stop the thread.
        A write still owed is dropped: the instance is being thrown away."""
        if self._owed is not None:
            self._owed = None
            assert self._pending is not None
            self._pending.set_exception(EngineWriteError(
                f"store {self._store_id!r}: closed before its engine write started"))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
