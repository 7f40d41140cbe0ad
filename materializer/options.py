"""MaterializerOptions: when to snapshot, how many at once, how parallel; with conf keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from changelog.errors import ConfigError
from changelog.units import parse_duration, parse_size

MB = 1024 * 1024
CONF_PREFIX = "spark.dstl.materialization."
_OFF = ("", "none", "off", "false", "disabled")


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
        by_key = {key: name for name, key in CONF_KEYS.items()}
        changes: dict[str, Any] = {}
        for full_key, raw in conf.items():
            if not full_key.startswith(prefix):
                continue
            key = full_key[len(prefix):]
            if key not in by_key:
                raise ConfigError(f"{full_key}: unknown materialization setting "
                                  f"(known: {', '.join(sorted(by_key))})")
            changes[by_key[key]] = _PARSERS[by_key[key]](raw, full_key)
        try:
            return replace(base or cls(), **changes)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (settings under {prefix!r})") from exc


def _is_off(raw: Any) -> bool:
    return raw is None or str(raw).strip().lower() in _OFF


def _optional_duration(raw: Any, key: str) -> float | None:
    return None if _is_off(raw) else parse_duration(raw, key)


def _int(raw: Any, key: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{key}: expected an integer, got {raw!r}")
    try:
        return int(str(raw).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: expected an integer, got {raw!r}") from exc


def _optional_int(raw: Any, key: str) -> int | None:
    return None if _is_off(raw) else _int(raw, key)


def _size(raw: Any, key: str) -> int:
    return parse_size(raw, key)


def _optional_str(raw: Any, key: str) -> str | None:
    text = "" if raw is None else str(raw).strip()
    return text or None


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

_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "interval": _optional_duration,
    "every_n_commits": _optional_int,
    "max_consecutive_failures": _int,
    "backstop_bytes": _size,
    "worker_threads": _int,
    "upload_parallelism": _int,
    "restore_parallelism": _int,
    "cache_dir": _optional_str,
}
assert set(CONF_KEYS) == set(_PARSERS) == {f.name for f in fields(MaterializerOptions)}
