"""ChangelogOptions: every knob of the durable short-term log, with its default and conf key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlsplit

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    Parser,
    parse_bool,
    parse_duration,
    parse_float,
    parse_int,
    parse_optional_int,
    parse_optional_text,
    parse_size,
    parse_word,
    read_section,
)

MB = 1024 * 1024
COMPRESSIONS = ("none", "zstd")
ADDRESSING_STYLES = ("auto", "path", "virtual")


@dataclass(frozen=True)
class ChangelogOptions:
    """Durations are seconds, sizes are bytes. `CONF_KEYS` maps each field to its conf key."""

    # batching (FLIP-158 defaults)
    persist_delay: float = 0.010
    persist_size_threshold: int = 10 * MB
    preemptive_persist_threshold: int = 5 * MB
    max_in_flight_bytes: int = 100 * MB
    max_concurrent_uploads: int = 5
    # file format
    compression: str = "none"
    compression_level: int = 3
    # retries (exactly one layer retries: this one)
    max_attempts: int = 3
    attempt_timeout: float = 10.0
    backoff_initial: float = 0.05
    backoff_max: float = 2.0
    # hedging
    hedging_enabled: bool = True
    hedge_quantile: float = 0.95
    hedge_min_delay: float = 0.05
    hedge_max_delay: float = 2.0
    hedge_budget: float = 0.10
    hedge_min_samples: int = 20
    hedge_max_hedges: int = 2
    # reading
    read_parallelism: int = 8
    cache_dir: str | None = None
    cache_max_bytes: int = 1024 * MB
    # S3 (credentials: explicit, or the usual AWS environment / profile chain when None)
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    s3_session_token: str | None = None
    s3_addressing_style: str = "auto"
    s3_max_pool_connections: int | None = None

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"{CONF_KEYS[name]} ({name}): {why}, got {getattr(self, name)!r}")

        for name in ("persist_delay", "attempt_timeout", "backoff_initial", "backoff_max",
                     "hedge_min_delay", "hedge_max_delay"):
            if getattr(self, name) < 0:
                fail(name, "must not be negative")
        for name in ("persist_size_threshold", "preemptive_persist_threshold",
                     "max_in_flight_bytes", "max_concurrent_uploads", "max_attempts",
                     "read_parallelism", "cache_max_bytes"):
            if getattr(self, name) <= 0:
                fail(name, "must be positive")
        if self.attempt_timeout == 0:
            fail("attempt_timeout", "must be positive")
        if self.compression not in COMPRESSIONS:
            fail("compression", f"must be one of {', '.join(COMPRESSIONS)}")
        if not 1 <= self.compression_level <= 22:
            fail("compression_level", "must be between 1 and 22")
        if not 0.0 < self.hedge_quantile < 1.0:
            fail("hedge_quantile", "must be between 0 and 1 (exclusive)")
        if not 0.0 <= self.hedge_budget <= 1.0:
            fail("hedge_budget", "must be between 0 and 1")
        if self.hedge_max_delay < self.hedge_min_delay:
            fail("hedge_max_delay", "must not be below hedge_min_delay")
        if self.hedge_min_samples < 1:
            fail("hedge_min_samples", "must be at least 1")
        if self.hedge_max_hedges < 1:
            fail("hedge_max_hedges", "must be at least 1 (hedging.enabled=false turns it off)")
        if self.s3_addressing_style not in ADDRESSING_STYLES:
            fail("s3_addressing_style", f"must be one of {', '.join(ADDRESSING_STYLES)}")
        if self.s3_max_pool_connections is not None and self.s3_max_pool_connections <= 0:
            fail("s3_max_pool_connections", "must be positive")
        if self.s3_endpoint_url is not None and not _is_http_url(self.s3_endpoint_url):
            fail("s3_endpoint_url", "must be an http:// or https:// URL")

    @property
    def pool_connections(self) -> int:
        """Connections needed for every in-flight upload plus its hedges, plus parallel reads."""
        if self.s3_max_pool_connections is not None:
            return self.s3_max_pool_connections
        return ((1 + self.hedge_max_hedges) * self.max_concurrent_uploads
                + self.read_parallelism + 4)

    def with_changes(self, **changes: Any) -> ChangelogOptions:
        return replace(self, **changes)

    @classmethod
    def from_conf(cls, conf: Mapping[str, str], prefix: str = "spark.dstl.changelog.",
                  base: ChangelogOptions | None = None) -> ChangelogOptions:
        """Options from string settings such as Spark conf; unknown keys under prefix fail."""
        changes = read_section(conf, prefix, CONF_KEYS, _PARSERS, "changelog")
        try:
            return replace(base or cls(), **changes)
        except ConfigError as exc:
            raise ConfigError(f"{prefix}{exc}") from exc  # the message starts with the key


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


CONF_KEYS: dict[str, str] = {
    "persist_delay": "persistDelay",
    "persist_size_threshold": "persistSizeThreshold",
    "preemptive_persist_threshold": "preEmptivePersistThreshold",
    "max_in_flight_bytes": "maxInFlight",
    "max_concurrent_uploads": "maxConcurrentUploads",
    "compression": "compression",
    "compression_level": "compressionLevel",
    "max_attempts": "retry.maxAttempts",
    "attempt_timeout": "retry.attemptTimeout",
    "backoff_initial": "retry.backoffInitial",
    "backoff_max": "retry.backoffMax",
    "hedging_enabled": "hedging.enabled",
    "hedge_quantile": "hedging.quantile",
    "hedge_min_delay": "hedging.minDelay",
    "hedge_max_delay": "hedging.maxDelay",
    "hedge_budget": "hedging.budget",
    "hedge_min_samples": "hedging.minSamples",
    "hedge_max_hedges": "hedging.maxHedges",
    "read_parallelism": "read.parallelism",
    "cache_dir": "read.cacheDir",
    "cache_max_bytes": "read.cacheMaxSize",
    "s3_endpoint_url": "s3.endpoint",
    "s3_region": "s3.region",
    "s3_access_key_id": "s3.accessKeyId",
    "s3_secret_access_key": "s3.secretAccessKey",
    "s3_session_token": "s3.sessionToken",
    "s3_addressing_style": "s3.addressingStyle",
    "s3_max_pool_connections": "s3.maxPoolConnections",
}

_DURATIONS = {"persist_delay", "attempt_timeout", "backoff_initial", "backoff_max",
              "hedge_min_delay", "hedge_max_delay"}
_SIZES = {"persist_size_threshold", "preemptive_persist_threshold", "max_in_flight_bytes",
          "cache_max_bytes"}


def _parser_for(name: str) -> Parser:
    if name in _DURATIONS:
        return parse_duration
    if name in _SIZES:
        return parse_size
    kinds: dict[str, Parser] = {
        "bool": parse_bool, "int": parse_int, "float": parse_float, "str": parse_word,
        "str | None": parse_optional_text, "int | None": parse_optional_int,
    }
    field_type = {f.name: f.type for f in fields(ChangelogOptions)}[name]
    return kinds[str(field_type)]


_PARSERS: dict[str, Parser] = {name: _parser_for(name) for name in CONF_KEYS}
assert set(CONF_KEYS) == {f.name for f in fields(ChangelogOptions)}
