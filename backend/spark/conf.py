"""spark.dstl.* settings: read on the driver, validated at query start, shipped as a plain dict.

The backend's own keys (state store, RocksDB, changelog, materialization) are parsed by
BackendOptions; the keys under `spark.dstl.query.` belong to the streaming integration.
Executors rebuild the options from the same dict, so driver and tasks cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark_dstl.backend.options import CONF_PREFIX, BackendOptions
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    Parser,
    parse_bool,
    parse_int,
    parse_text,
    parse_word,
    read_section,
)

QUERY_SECTION = "query."
QUERY_PREFIX = CONF_PREFIX + QUERY_SECTION
OUTPUT_MODES = ("collect", "cache")


@dataclass(frozen=True)
class QueryOptions:
    """Per-query knobs of the streaming integration; `CONF_KEYS` names their keys."""

    checkpoint_location: str | None = None
    engine_checkpoint_location: str | None = None
    partitions: int | None = None
    operator_name: str = "stateful"
    output_mode: str = "collect"
    cleanup_interval: int = 10
    log_progress: bool = True

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{QUERY_PREFIX}{CONF_KEYS[name]}: {why}, "
                              f"got {getattr(self, name)!r}")

        if self.checkpoint_location is not None and not self.checkpoint_location.strip():
            fail("checkpoint_location", "must not be blank")
        if self.engine_checkpoint_location is not None and \
                not self.engine_checkpoint_location.strip():
            fail("engine_checkpoint_location", "must not be blank")
        if self.partitions is not None and self.partitions < 1:
            fail("partitions", "must be at least 1")
        if not self.operator_name or "/" in self.operator_name or ".." in self.operator_name:
            fail("operator_name", "must be a non-empty name without '/' or '..'")
        if self.output_mode not in OUTPUT_MODES:
            fail("output_mode", f"must be one of {', '.join(OUTPUT_MODES)}")
        if self.cleanup_interval < 0:
            fail("cleanup_interval", "must not be negative (0 switches cleanup off)")


CONF_KEYS: dict[str, str] = {
    "checkpoint_location": "checkpointLocation",
    "engine_checkpoint_location": "engineCheckpointLocation",
    "partitions": "partitions",
    "operator_name": "operatorName",
    "output_mode": "outputMode",
    "cleanup_interval": "cleanupInterval",
    "log_progress": "logProgress",
}


_PARSERS: dict[str, Parser] = {
    "checkpoint_location": parse_text,
    "engine_checkpoint_location": parse_text,
    "partitions": parse_int,
    "operator_name": parse_text,
    "output_mode": parse_word,
    "cleanup_interval": parse_int,
    "log_progress": parse_bool,
}


def _query_options(settings: Mapping[str, str]) -> QueryOptions:
    return QueryOptions(**read_section(settings, QUERY_PREFIX, CONF_KEYS, _PARSERS, "query"))


def normalize_key(key: str) -> str:
    """'changelog.persistDelay' and 'spark.dstl.changelog.persistDelay' name the same key."""
    if not isinstance(key, str) or not key.strip():
        raise ConfigError(f"setting name must be a non-empty string, got {key!r}")
    key = key.strip()
    return key if key.startswith(CONF_PREFIX) else CONF_PREFIX + key


@dataclass(frozen=True)
class DstlConf:
    """Validated settings of one query; `settings` is what travels to the executors."""

    settings: Mapping[str, str]
    backend: BackendOptions = field(compare=False)
    query: QueryOptions = field(compare=False)

    @property
    def backend_settings(self) -> dict[str, str]:
        """The settings the state backend reads (everything but spark.dstl.query.*)."""
        return {k: v for k, v in self.settings.items() if not k.startswith(QUERY_PREFIX)}

    @classmethod
    def resolve(cls, spark_conf: Mapping[str, str],
                overrides: Mapping[str, Any] | None = None) -> DstlConf:
        """Session settings under spark.dstl., then per-query overrides (short or full keys)."""
        settings = {k: str(v) for k, v in spark_conf.items() if k.startswith(CONF_PREFIX)}
        for key, value in (overrides or {}).items():
            settings[normalize_key(key)] = _to_setting(value)
        return cls.from_settings(settings)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> DstlConf:
        frozen = dict(sorted(settings.items()))
        backend = BackendOptions.from_conf(frozen, other_sections=(QUERY_SECTION,))
        return cls(frozen, backend, _query_options(frozen))

    @classmethod
    def from_session(cls, spark: Any, overrides: Mapping[str, Any] | None = None) -> DstlConf:
        """Read every spark.dstl.* key of a SparkSession (runtime conf and SparkConf)."""
        found: dict[str, str] = {}
        for key, value in _launch_settings(spark):
            if key.startswith(CONF_PREFIX):
                found[key] = value
        found.update({k: v for k, v in spark.conf.getAll.items() if k.startswith(CONF_PREFIX)})
        return cls.resolve(found, overrides)


def _launch_settings(spark: Any) -> list[tuple[str, str]]:
    """The SparkConf's settings; a Spark Connect session has no SparkContext and shows its
    settings through spark.conf alone."""
    try:
        context = spark.sparkContext
    except AttributeError:  # Spark Connect: PySparkAttributeError
        return []
    return list(context.getConf().getAll())


def _to_setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)
