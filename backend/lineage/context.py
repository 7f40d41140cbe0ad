"""LocationContext: what every provider of one checkpoint location shares."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.backend.backend_settings import BackendSettings
from pyspark_dstl.backend.engines.rocksdb import RocksDBSettings
from pyspark_dstl.changelog.changelog_service import ChangelogService
from pyspark_dstl.materializer.materializer import Materializer


@dataclass(frozen=True)
class LocationContext:
    """One changelog service, one materializer and one local directory per checkpoint
    location."""

    location: str
    storage: ChangelogService
    materializer: Materializer
    settings: BackendSettings
    local_root: str
    rocksdb: RocksDBSettings
