"""Spark-style durations ("10ms", "1s", "5min") and sizes ("10MB", "512k") as numbers."""

from __future__ import annotations

import re

from pyspark_dstl.core.errors import ConfigError

MIB = 1024 * 1024  # bytes in a mebibyte; what a size setting's "MB" means, as in Spark

_DURATION_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
# the words Spark's interval strings use, as in df.withWatermark("ts", "10 minutes")
_DURATION_UNITS.update({word: seconds for words, seconds in (
    (("microsecond", "microseconds"), 1e-6),
    (("millisecond", "milliseconds"), 1e-3),
    (("second", "seconds", "secs"), 1.0),
    (("minute", "minutes", "mins"), 60.0),
    (("hour", "hours"), 3600.0),
    (("day", "days"), 86400.0),
) for word in words})
_SIZE_UNITS = {
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_duration(value: str | float | int, key: str = "duration") -> float:
    """Seconds from "10ms", "2s", "5min" or a bare number of seconds; names `key` on error."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like '10ms', got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ConfigError(f"{key}: duration must not be negative, got {value!r}")
        return float(value)
    match = _NUMBER_UNIT.match(str(value))
    if not match:
        raise ConfigError(f"{key}: expected a duration like '10ms' or '5s', got {value!r}")
    number, unit = float(match.group(1)), match.group(2).lower() or "s"
    if unit not in _DURATION_UNITS:
        raise ConfigError(f"{key}: unknown duration unit {unit!r} in {value!r}")
    return number * _DURATION_UNITS[unit]


def parse_size(value: str | int, key: str = "size") -> int:
    """Bytes from "10MB", "512k", "1g" or a bare number of bytes; names `key` on error."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size like '10MB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{key}: size must not be negative, got {value!r}")
        return value
    match = _NUMBER_UNIT.match(str(value))
    if not match:
        raise ConfigError(f"{key}: expected a size like '10MB' or '512k', got {value!r}")
    number, unit = float(match.group(1)), match.group(2).lower() or "b"
    if unit not in _SIZE_UNITS:
        raise ConfigError(f"{key}: unknown size unit {unit!r} in {value!r}")
    return int(number * _SIZE_UNITS[unit])
