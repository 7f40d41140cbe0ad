"""Parsing string settings (Spark conf style) into option fields, shared by every package.

Each options class declares its fields' conf keys and value parsers; `read_section` does the
rest the same way everywhere: only keys under the prefix, unknown keys fail with the key named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.units import parse_duration, parse_size

Parser = Callable[[Any, str], Any]
OFF_WORDS = ("", "none", "off", "false", "disabled")


def parse_bool(raw: Any, key: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key}: expected true or false, got {raw!r}")


def parse_int(raw: Any, key: str) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{key}: expected an integer, got {raw!r}")
    try:
        return int(str(raw).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: expected an integer, got {raw!r}") from exc


def parse_float(raw: Any, key: str) -> float:
    try:
        return float(str(raw).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: expected a number, got {raw!r}") from exc


def parse_text(raw: Any, key: str) -> str:
    text = str(raw).strip()
    if not text:
        raise ConfigError(f"{key}: must not be blank")
    return text


def parse_word(raw: Any, key: str) -> str:
    """A keyword such as a codec or mode name: trimmed and lower-cased."""
    return parse_text(raw, key).lower()


def parse_optional_text(raw: Any, key: str) -> str | None:
    text = "" if raw is None else str(raw).strip()
    return text or None


def is_off(raw: Any) -> bool:
    return raw is None or str(raw).strip().lower() in OFF_WORDS


def parse_optional_int(raw: Any, key: str) -> int | None:
    return None if is_off(raw) else parse_int(raw, key)


def parse_optional_duration(raw: Any, key: str) -> float | None:
    return None if is_off(raw) else parse_duration(raw, key)


__all__ = [
    "Parser",
    "is_off",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_optional_duration",
    "parse_optional_int",
    "parse_optional_text",
    "parse_size",
    "parse_text",
    "parse_word",
    "read_section",
]


def read_section(conf: Mapping[str, Any], prefix: str, keys: Mapping[str, str],
                 parsers: Mapping[str, Parser], what: str,
                 skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Field values for every key under `prefix`; keys under a `skip` sub-prefix are left alone.

    `keys` maps field name -> key below the prefix, `parsers` field name -> parser.
    """
    by_key = {key: name for name, key in keys.items()}
    skipped = tuple(prefix + section for section in skip)
    values: dict[str, Any] = {}
    for full_key, raw in conf.items():
        if not full_key.startswith(prefix) or (skipped and full_key.startswith(skipped)):
            continue
        key = full_key[len(prefix):]
        if key not in by_key:
            known = ", ".join(sorted(prefix + k for k in by_key))
            raise ConfigError(f"{full_key}: unknown {what} setting (known: {known}"
                              + (f"; and {', '.join(s + '*' for s in skipped)}" if skipped
                                 else "") + ")")
        values[by_key[key]] = parsers[by_key[key]](raw, full_key)
    return values
