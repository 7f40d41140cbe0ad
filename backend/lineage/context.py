"""RootContext: what every provider of one checkpoint root shares."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.materializer.materializer import Materializer


@dataclass(frozen=True)
class RootContext:
    """One changelog storage, one materializer and one local directory per checkpoint root."""

    url: str
    storage: ChangelogService
    materializer: Materializer
    options: BackendSettings
    local_root: str
    rocksdb: RocksDBSettings
