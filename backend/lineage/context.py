"""RootContext: what every provider of one checkpoint root shares."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.backend.options import BackendOptions
from pyspark_dstl.changelog.storage_service import ChangelogStorage
from pyspark_dstl.materializer.materializer import Materializer


@dataclass(frozen=True)
class RootContext:
    """One changelog storage, one materializer and one local directory per checkpoint root."""

    url: str
    storage: ChangelogStorage
    materializer: Materializer
    options: BackendOptions
    local_root: str
    rocksdb: RocksDBSettings
