"""BackendSettings: the state store's own knobs plus the changelog's and the materializer's."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.core.settings import (
    BOOL,
    DURATION,
    INT,
    SIZE,
    TEXT,
    Rule,
    Section,
    Settings,
    setting,
    setting_keys,
    subsection,
)
from pyspark_dstl.core.units import MIB
from pyspark_dstl.materializer.materializer_settings import MaterializerSettings

SETTINGS_PREFIX = "spark.dstl."
DEFAULT_PROVIDER = "pyspark_dstl.backend.store.rocksdb_provider.RocksDBChangelogProvider"
CHANGELOG_SECTION = "changelog."
MATERIALIZATION_SECTION = "materialization."
FENCING_SECTION = "fencing."
MIN_LEASE_SECONDS = 0.5
COMPACTION_STYLES = ("level", "universal")
CLASS_PATH = Rule("be a 'module.Class' path", lambda path: "." in path)


@dataclass(frozen=True)
class FencingSettings(Settings):
    """One writer per checkpoint (lineage/fencing.py): the holder renews its lease every
    third of `lease_duration`; a run that finds the holder's renewals stopped for a whole
    `lease_duration` (by its own clock) presumes it dead and takes over."""

    SECTION = Section(SETTINGS_PREFIX + FENCING_SECTION, "fencing")

    lease_duration: float = setting(
        "leaseDuration", DURATION, 30.0,
        "How long a checkpoint's holder may go without renewing its lease before another "
        "run presumes it dead and takes over (the holder renews every third of it).",
        at_least=MIN_LEASE_SECONDS, at_most=24 * 3600)


FENCING_KEYS: dict[str, str] = setting_keys(FencingSettings)


def default_local_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "pyspark-dstl")


@dataclass(frozen=True)
class BackendSettings(Settings):
    """Sizes in bytes, durations in seconds; the changelog and materialization sections nest."""

    SECTION = Section(SETTINGS_PREFIX, "state backend")

    provider_class: str = setting(
        "stateStore.providerClass", TEXT, DEFAULT_PROVIDER,
        "State store provider by class path. "
        "`pyspark_dstl.backend.store.memory_provider.InMemoryProvider` keeps state in a dict "
        "(small state, same files on storage).", rule=CLASS_PATH)
    min_batches_to_retain: int = setting(
        "stateStore.minBatchesToRetain", INT, 100,
        "Committed versions kept restorable. Cleanup deletes only what no retained "
        "checkpoint references, and only below the oldest retained version. At least 2: a run "
        "taken over keeps the batch it may still be recovering.", at_least=2)
    max_batches_held_for_feeds: int = setting(
        "stateStore.maxBatchesHeldForFeeds", INT, 1000,
        "Committed batches beyond `minBatchesToRetain` that cleanup keeps for a change feed "
        "(`spark.readStream.format(\"dstl-changes\")`) that has not read them yet; a feed "
        "further behind is let go and fails by name at its next read. `0`: feeds hold "
        "nothing back ([state-data.md](state-data.md)).", at_least=0)
    local_dir: str = setting(
        "stateStore.localDir", TEXT, factory=default_local_dir,
        doc="Per-host directory for open RocksDB instances, restore caches and local "
            "checkpoints. Use a fast local disk.",
        shown_default="`<system temp>/pyspark-dstl`")
    lock_timeout: float = setting(
        "stateStore.lockTimeout", DURATION, 30.0,
        "How long a task waits for another process on the same host to release a store "
        "directory.", at_least=0)
    background_engine_write: bool = setting(
        "stateStore.backgroundEngineWrite", BOOL, True,
        "Return from a commit once its changelog is durable and write the batch to the local "
        "RocksDB on a background thread; the next transaction, snapshot or close of the "
        "store waits for that write, and one that fails makes the next load restore the "
        "version from the checkpoint. `false` writes inside the commit.")
    tx_cache_max_entries: int = setting(
        "stateStore.txCache.maxEntries", INT, 100_000,
        "Writes buffered in memory per transaction before they are flushed to RocksDB and "
        "the changelog (read-your-writes holds either way).", above=0)
    tx_cache_max_bytes: int = setting(
        "stateStore.txCache.maxSize", SIZE, 64 * MIB, "The same bound in bytes.", above=0)
    write_buffer_size: int = setting(
        "rocksdb.writeBufferSize", SIZE, 64 * MIB, "RocksDB memtable size, per open store.",
        above=0)
    block_cache_size: int = setting(
        "rocksdb.blockCacheSize", SIZE, 128 * MIB,
        "RocksDB block cache, shared by every store of a process: one per state backend, "
        "i.e. per process and distinct set of `spark.dstl.*` settings, not per store.",
        above=0)
    max_background_jobs: int = setting(
        "rocksdb.maxBackgroundJobs", INT, 2,
        "RocksDB flush and compaction threads per open store.", above=0)
    compaction_style: str = setting(
        "rocksdb.compactionStyle", TEXT, "level",
        "`level` (leveled, dynamic level sizes) or `universal`. How much of the state a "
        "compaction rewrites decides how many SST files consecutive snapshots share, hence "
        "checkpoint storage and the bytes each snapshot uploads "
        "([operations.md](operations.md), \"Compaction and checkpoint storage\").",
        choices=COMPACTION_STYLES)
    max_bytes_for_level_base: int = setting(
        "rocksdb.maxBytesForLevelBase", SIZE, 256 * MIB,
        "Leveled only: target size of the first level below L0. With RocksDB's default a "
        "state of a few hundred MB sits in one level that every L0 compaction rewrites "
        "whole; `16MB` (with the two below at `4MB` and `2`) rewrites a slice per "
        "compaction: lower peak, higher median checkpoint storage.", above=0)
    target_file_size_base: int = setting(
        "rocksdb.targetFileSizeBase", SIZE, 64 * MIB,
        "Target SST file size; smaller files let a compaction rewrite (and a snapshot "
        "upload) less at once.", above=0)
    level0_compaction_trigger: int = setting(
        "rocksdb.level0CompactionTrigger", INT, 4,
        "L0 files that start a compaction; each snapshot flushes one, and L0 files hold "
        "overwritten versions, so a lower value keeps local (and snapshot) space "
        "amplification lower.", above=0)
    universal_max_size_amplification_percent: int = setting(
        "rocksdb.universal.maxSizeAmplificationPercent", INT, 200,
        "Universal only: how much larger than the last sorted run the rest may grow before "
        "a full compaction.", above=0, unit="%")
    changelog: ChangelogSettings = subsection(ChangelogSettings, CHANGELOG_SECTION)
    materialization: MaterializerSettings = subsection(MaterializerSettings,
                                                      MATERIALIZATION_SECTION)
    fencing: FencingSettings = subsection(FencingSettings, FENCING_SECTION)


BACKEND_SETTING_KEYS: dict[str, str] = setting_keys(BackendSettings)
"""Attribute path -> key below spark.dstl., nested sections included
(e.g. "changelog.persist_delay": "changelog.persistDelay")."""
