"""The default provider: state in a local RocksDB (rocksdict, raw mode, WAL off)."""

from __future__ import annotations

import os

from backend.engine import Engine
from backend.loader import DB_DIR
from backend.provider import ChangelogProvider
from backend.rocksdb_engine import RocksDBEngine


class RocksDBChangelogProvider(ChangelogProvider):
    """RocksDB is opened on the first load, never at construction."""

    def _empty_engine(self, instance_dir: str) -> Engine:
        return RocksDBEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb)

    def _engine_from_snapshot(self, db_path: str, instance_dir: str) -> Engine:
        return RocksDBEngine(db_path, self._context.rocksdb)

    def _reopen_engine(self, instance_dir: str) -> Engine | None:
        return RocksDBEngine(os.path.join(instance_dir, DB_DIR), self._context.rocksdb,
                             create=False)
