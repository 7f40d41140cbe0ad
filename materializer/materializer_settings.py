"""MaterializerSettings: when to snapshot, how many at once, how parallel; each declared once."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.core.settings import (
    INT,
    OPTIONAL_DURATION,
    OPTIONAL_INT,
    OPTIONAL_TEXT,
    SIZE,
    Section,
    Settings,
    setting,
    setting_keys,
)
from pyspark_dstl.core.units import MIB

MATERIALIZATION_PREFIX = "spark.dstl.materialization."


@dataclass(frozen=True)
class MaterializerSettings(Settings):
    """Durations in seconds, sizes in bytes; None switches a trigger off.

    Defaults follow Flink's changelog backend (10 min, 3 failures tolerated) and Spark's
    `minDeltasForSnapshot` (10 commits).
    """

    SECTION = Section(MATERIALIZATION_PREFIX, "materialization")

    interval: float | None = setting(
        "interval", OPTIONAL_DURATION, 600.0,
        "Time between snapshots of a store (`off` to disable); the first one is spread by a "
        "hash of the store id.", above=0)
    every_n_commits: int | None = setting(
        "everyNCommits", OPTIONAL_INT, 10,
        "Snapshot after this many commits since the last one (`off` to disable).", at_least=1)
    max_consecutive_failures: int = setting(
        "maxConsecutiveFailures", INT, 3,
        "Failed snapshots in a row tolerated before the next commit fails with "
        "`MaterializationFailedError`.", at_least=0)
    backstop_bytes: int = setting(
        "backstopSize", SIZE, 512 * MIB,
        "Changelog since the last snapshot above which a commit snapshots synchronously "
        "(bounds recovery time).", above=0)
    worker_threads: int = setting(
        "workerThreads", INT, 2, "Snapshots uploading at once per process.", above=0)
    upload_parallelism: int = setting(
        "uploadParallelism", INT, 4, "Files uploaded at once per snapshot.", above=0)
    restore_parallelism: int = setting(
        "restoreParallelism", INT, 8, "Files downloaded at once per restore.", above=0)
    cache_dir: str | None = setting(
        "cacheDir", OPTIONAL_TEXT, None,
        "Local cache of downloaded snapshot files shared by restores of a store.",
        shown_default="under `stateStore.localDir`")


MATERIALIZER_SETTING_KEYS: dict[str, str] = setting_keys(MaterializerSettings)
"""Field name -> key below spark.dstl.materialization."""
