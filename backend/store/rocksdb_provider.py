"""The default provider: state in a local RocksDB (rocksdict, raw mode, WAL off)."""

from __future__ import annotations

import os

from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.engines.rocksdb import RocksDBEngine
from pyspark_dstl.backend.lineage.loader import DB_DIR
from pyspark_dstl.backend.store.provider import ChangelogProvider


class RocksDBChangelogProvider(ChangelogProvider):
    """RocksDB is opened on the first load, never at construction."""

    def _empty_engine(self, instance_dir: str) -> Engine:
        return RocksDBEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb)

    def _engine_from_snapshot(self, db_path: str, instance_dir: str) -> Engine:
        return RocksDBEngine(db_path, self._context.rocksdb)

    def _engine_dir(self, instance_dir: str) -> str | None:
        return os.path.join(instance_dir, DB_DIR)

    def _reopen_engine(self, instance_dir: str) -> Engine | None:
        return RocksDBEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb,
                             create=False)
