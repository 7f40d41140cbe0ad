"""BackendOptions: the state store's own knobs plus the changelog's and the materializer's."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark_dstl.changelog.config import ChangelogOptions
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    Parser,
    parse_duration,
    parse_int,
    parse_size,
    parse_text,
    read_section,
)
from pyspark_dstl.materializer.options import MaterializerOptions

MB = 1024 * 1024
CONF_PREFIX = "spark.dstl."
DEFAULT_PROVIDER = "pyspark_dstl.backend.store.rocksdb_provider.RocksDBChangelogProvider"
CHANGELOG_SECTION = "changelog."
MATERIALIZATION_SECTION = "materialization."
FENCING_SECTION = "fencing."
MIN_LEASE_SECONDS = 0.5


@dataclass(frozen=True)
class FencingOptions:
    """One writer per checkpoint (lineage/fencing.py): the holder renews its lease every
    third of `lease_duration`; a run that finds the holder's renewals stopped for a whole
    `lease_duration` (by its own clock) presumes it dead and takes over."""

    lease_duration: float = 30.0

    def __post_init__(self) -> None:
        if not MIN_LEASE_SECONDS <= self.lease_duration <= 24 * 3600:
            raise ConfigError(f"{CONF_PREFIX}{FENCING_SECTION}leaseDuration (lease_duration): "
                              f"must be between {MIN_LEASE_SECONDS} s and one day, got "
                              f"{self.lease_duration!r}")

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], prefix: str) -> FencingOptions:
        return cls(**read_section(conf, prefix, FENCING_KEYS,
                                  {"lease_duration": parse_duration}, "fencing"))


FENCING_KEYS: dict[str, str] = {"lease_duration": "leaseDuration"}


def default_local_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "pyspark-dstl")


@dataclass(frozen=True)
class BackendOptions:
    """Sizes in bytes, durations in seconds. `CONF_KEYS` maps each own field to its conf key."""

    provider_class: str = DEFAULT_PROVIDER
    min_batches_to_retain: int = 100
    local_dir: str = field(default_factory=default_local_dir)
    lock_timeout: float = 30.0
    tx_cache_max_entries: int = 100_000
    tx_cache_max_bytes: int = 64 * MB
    write_buffer_size: int = 64 * MB
    block_cache_size: int = 128 * MB
    max_background_jobs: int = 2
    compaction_style: str = "level"
    max_bytes_for_level_base: int = 256 * MB
    target_file_size_base: int = 64 * MB
    level0_compaction_trigger: int = 4
    universal_max_size_amplification_percent: int = 200
    changelog: ChangelogOptions = field(default_factory=ChangelogOptions)
    materialization: MaterializerOptions = field(default_factory=MaterializerOptions)
    fencing: FencingOptions = field(default_factory=FencingOptions)

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{CONF_PREFIX}{CONF_KEYS[name]} ({name}): {why}, "
                              f"got {getattr(self, name)!r}")

        if not self.provider_class or "." not in self.provider_class:
            fail("provider_class", "must be a 'module.Class' path")
        if not self.local_dir or not self.local_dir.strip():
            fail("local_dir", "must not be blank")
        if self.lock_timeout < 0:
            fail("lock_timeout", "must not be negative")
        for name in ("min_batches_to_retain", "tx_cache_max_entries", "tx_cache_max_bytes",
                     "write_buffer_size", "block_cache_size", "max_background_jobs",
                     "max_bytes_for_level_base", "target_file_size_base",
                     "level0_compaction_trigger", "universal_max_size_amplification_percent"):
            if getattr(self, name) < 1:
                fail(name, "must be positive")
        if self.compaction_style not in ("level", "universal"):
            fail("compaction_style", "must be 'level' or 'universal'")

    def with_changes(self, **changes: Any) -> BackendOptions:
        return replace(self, **changes)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], prefix: str = CONF_PREFIX,
                  other_sections: Iterable[str] = ()) -> BackendOptions:
        """Options from string settings such as Spark conf.

        Every key under `prefix` must be known, except those under one of `other_sections`
        (sub-prefixes that another component reads, e.g. "query.").
        """
        changes = read_section(conf, prefix, CONF_KEYS, _PARSERS, "state backend",
                               skip=(CHANGELOG_SECTION, MATERIALIZATION_SECTION,
                                     FENCING_SECTION, *other_sections))
        changes["changelog"] = ChangelogOptions.from_conf(conf, prefix + CHANGELOG_SECTION)
        changes["materialization"] = MaterializerOptions.from_conf(
            conf, prefix + MATERIALIZATION_SECTION)
        changes["fencing"] = FencingOptions.from_conf(conf, prefix + FENCING_SECTION)
        return cls(**changes)


CONF_KEYS: dict[str, str] = {
    "provider_class": "stateStore.providerClass",
    "min_batches_to_retain": "stateStore.minBatchesToRetain",
    "local_dir": "stateStore.localDir",
    "lock_timeout": "stateStore.lockTimeout",
    "tx_cache_max_entries": "stateStore.txCache.maxEntries",
    "tx_cache_max_bytes": "stateStore.txCache.maxSize",
    "write_buffer_size": "rocksdb.writeBufferSize",
    "block_cache_size": "rocksdb.blockCacheSize",
    "max_background_jobs": "rocksdb.maxBackgroundJobs",
    "compaction_style": "rocksdb.compactionStyle",
    "max_bytes_for_level_base": "rocksdb.maxBytesForLevelBase",
    "target_file_size_base": "rocksdb.targetFileSizeBase",
    "level0_compaction_trigger": "rocksdb.level0CompactionTrigger",
    "universal_max_size_amplification_percent": "rocksdb.universal.maxSizeAmplificationPercent",
}

_PARSERS: dict[str, Parser] = {
    "provider_class": parse_text,
    "min_batches_to_retain": parse_int,
    "local_dir": parse_text,
    "lock_timeout": parse_duration,
    "tx_cache_max_entries": parse_int,
    "tx_cache_max_bytes": parse_size,
    "write_buffer_size": parse_size,
    "block_cache_size": parse_size,
    "max_background_jobs": parse_int,
    "compaction_style": parse_text,
    "max_bytes_for_level_base": parse_size,
    "target_file_size_base": parse_size,
    "level0_compaction_trigger": parse_int,
    "universal_max_size_amplification_percent": parse_int,
}
