"""A provider for small state: a dict, with the same changelog and snapshot files as RocksDB."""

from __future__ import annotations

import shutil

from pyspark_dstl.backend.engines.base import Engine
from pyspark_dstl.backend.engines.memory import MemoryEngine
from pyspark_dstl.backend.store.provider import ChangelogProvider


class InMemoryProvider(ChangelogProvider):
    def _empty_engine(self, instance_dir: str) -> Engine:
        return MemoryEngine(instance_dir)

    def _engine_from_snapshot(self, db_path: str, instance_dir: str) -> Engine:
        engine = MemoryEngine.from_rocksdb(db_path, instance_dir)
        shutil.rmtree(db_path, ignore_errors=True)
        return engine
