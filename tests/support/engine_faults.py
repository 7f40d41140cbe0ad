"""A RocksDB provider whose engine writes fail on demand: the engine-side fault injector.

The engine is the real RocksDBEngine; while `EngineFaults` is armed, its next batch write
raises OSError before it reaches RocksDB, as a full or failing local disk would. Tests arm it
for the write they want to fail and select the provider by class path (FAILING_PROVIDER).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from pyspark_dstl.backend.engines.base import BlockWrite, Engine, TableWrite
from pyspark_dstl.backend.engines.rocksdb import RocksDBEngine, RocksDBSettings
from pyspark_dstl.backend.lineage.loader import DB_DIR
from pyspark_dstl.backend.store.rocksdb_provider import RocksDBChangelogProvider

FAILING_PROVIDER = "tests.support.engine_faults.FailingWriteProvider"


class EngineFaults:
    """How many of the coming batch writes fail (process-wide; tests reset it)."""

    _lock = threading.Lock()
    _failures_left = 0
    failed = 0

    @classmethod
    def fail_next_writes(cls, count: int = 1) -> None:
        with cls._lock:
            cls._failures_left = count

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls._failures_left = 0
            cls.failed = 0

    @classmethod
    def take(cls) -> bool:
        with cls._lock:
            if cls._failures_left <= 0:
                return False
            cls._failures_left -= 1
            cls.failed += 1
            return True


class FailingWriteEngine(RocksDBEngine):
    def __init__(self, path: str, settings: RocksDBSettings, create: bool = True) -> None:
        super().__init__(path, settings, create)

    def apply_tables(self, tables: Iterable[TableWrite]) -> None:
        self._maybe_fail()
        super().apply_tables(tables)

    def apply_blocks(self, blocks: Iterable[BlockWrite]) -> None:
        self._maybe_fail()
        super().apply_blocks(blocks)

    def _maybe_fail(self) -> None:
        if EngineFaults.take():
            raise OSError(f"injected write failure on RocksDB at {self.path!r}")


class FailingWriteProvider(RocksDBChangelogProvider):
    def _empty_engine(self, instance_dir: str) -> Engine:
        return FailingWriteEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb)

    def _engine_from_snapshot(self, db_path: str, instance_dir: str) -> Engine:
        return FailingWriteEngine(db_path, self._context.rocksdb)

    def _reopen_engine(self, instance_dir: str) -> Engine | None:
        return FailingWriteEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb,
                                  create=False)
