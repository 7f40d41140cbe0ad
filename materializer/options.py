"""MaterializerOptions: when to snapshot, how many at once, how parallel; with conf keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    Parser,
    parse_int,
    parse_optional_duration,
    parse_optional_int,
    parse_optional_text,
    parse_size,
    read_section,
)

MB = 1024 * 1024
CONF_PREFIX = "spark.dstl.materialization."


@dataclass(frozen=True)
class MaterializerOptions:
    """Durations in seconds, sizes in bytes; None switches a trigger off.

    Defaults follow Flink's changelog backend (10 min, 3 failures tolerated) and Spark's
    `minDeltasForSnapshot` (10 commits).
    """

    interval: float | None = 600.0
    every_n_commits: int | None = 10
    max_consecutive_failures: int = 3
    backstop_bytes: int = 512 * MB
    worker_threads: int = 2
    upload_parallelism: int = 4
    restore_parallelism: int = 8
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{CONF_PREFIX}{CONF_KEYS[name]} ({name}): {why}, "
                              f"got {getattr(self, name)!r}")

        if self.interval is not None and not self.interval > 0:
            fail("interval", "must be positive (or None to switch it off)")
        if self.every_n_commits is not None and self.every_n_commits < 1:
            fail("every_n_commits", "must be at least 1 (or None to switch it off)")
        if self.max_consecutive_failures < 0:
            fail("max_consecutive_failures", "must not be negative")
        for name in ("backstop_bytes", "worker_threads", "upload_parallelism",
                     "restore_parallelism"):
            if getattr(self, name) <= 0:
                fail(name, "must be positive")
        if self.cache_dir is not None and not self.cache_dir.strip():
            fail("cache_dir", "must not be blank")

    def with_changes(self, **changes: Any) -> MaterializerOptions:
        return replace(self, **changes)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], prefix: str = CONF_PREFIX,
                  base: MaterializerOptions | None = None) -> MaterializerOptions:
        """Options from string settings such as Spark conf; unknown keys under prefix fail."""
        changes = read_section(conf, prefix, CONF_KEYS, _PARSERS, "materialization")
        try:
            return replace(base or cls(), **changes)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (settings under {prefix!r})") from exc


CONF_KEYS: dict[str, str] = {
    "interval": "interval",
    "every_n_commits": "everyNCommits",
    "max_consecutive_failures": "maxConsecutiveFailures",
    "backstop_bytes": "backstopSize",
    "worker_threads": "workerThreads",
    "upload_parallelism": "uploadParallelism",
    "restore_parallelism": "restoreParallelism",
    "cache_dir": "cacheDir",
}

_PARSERS: dict[str, Parser] = {
    "interval": parse_optional_duration,
    "every_n_commits": parse_optional_int,
    "max_consecutive_failures": parse_int,
    "backstop_bytes": parse_size,
    "worker_threads": parse_int,
    "upload_parallelism": parse_int,
    "restore_parallelism": parse_int,
    "cache_dir": parse_optional_text,
}
assert set(CONF_KEYS) == set(_PARSERS) == {f.name for f in fields(MaterializerOptions)}
