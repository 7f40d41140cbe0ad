"""ChangelogSettings: every knob of the durable short-term log, each declared once with its key."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_dstl.changelog.storage.storage_settings import ConnectionNeeds, StorageSettings
from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    OPTIONAL_TEXT,
    SIZE,
    WORD,
    Section,
    Settings,
    setting,
    setting_keys,
    subsection,
)
from pyspark_dstl.core.units import MIB

COMPRESSIONS = ("none", "zstd")


@dataclass(frozen=True)
class ChangelogSettings(Settings):
    """Durations are seconds, sizes are bytes; `storage` holds the S3 connection settings."""

    SECTION = Section("spark.dstl.changelog.", "changelog")

    # batching (FLIP-158 defaults)
    persist_delay: float = setting(
        "persistDelay", DURATION, 0.010,
        "How long a persist waits for other writers of the process so their changes share "
        "one upload.", at_least=0)
    persist_size_threshold: int = setting(
        "persistSizeThreshold", SIZE, 10 * MIB,
        "Queued bytes that start an upload at once, without waiting for the delay.", above=0)
    preemptive_persist_threshold: int = setting(
        "preEmptivePersistThreshold", SIZE, 5 * MIB,
        "A writer with more pending bytes uploads them before anybody asks, so a checkpoint "
        "has less to do.", above=0)
    max_in_flight_bytes: int = setting(
        "maxInFlight", SIZE, 100 * MIB,
        "Bytes queued or uploading at once; past it `append`/`persist` block (backpressure) "
        "and the time blocked is counted.", above=0)
    max_concurrent_uploads: int = setting(
        "maxConcurrentUploads", INT, 5, "Uploads (files) in flight at once.", above=0)
    # file format
    compression: str = setting(
        "compression", WORD, "none", "Codec of each change set.", choices=COMPRESSIONS)
    compression_level: int = setting(
        "compressionLevel", INT, 3, "zstd level.", at_least=1, at_most=22)
    # retries (exactly one layer retries: this one)
    max_attempts: int = setting(
        "retry.maxAttempts", INT, 3,
        "Attempts per upload or read; only throttling, 5xx, 409 conflicts, connection errors "
        "and timeouts are retried.", above=0)
    attempt_timeout: float = setting(
        "retry.attemptTimeout", DURATION, 10.0,
        "Limit of one attempt (request plus its hedges); also the connect and read timeout "
        "of S3 requests.", above=0)
    backoff_initial: float = setting(
        "retry.backoffInitial", DURATION, 0.05,
        "Full-jitter exponential backoff: the first wait is random in [0, this].", at_least=0)
    backoff_max: float = setting(
        "retry.backoffMax", DURATION, 2.0, "Cap of one backoff wait.", at_least=0)
    # hedging
    hedging_enabled: bool = setting(
        "hedging.enabled", BOOL, True,
        "Start another identical create-only request when an upload is slower than the "
        "quantile below.")
    hedge_quantile: float = setting(
        "hedging.quantile", FLOAT, 0.95,
        "Quantile of recent upload latencies after which a hedge starts.", above=0, below=1)
    hedge_min_delay: float = setting(
        "hedging.minDelay", DURATION, 0.05, "Floor of the hedge delay.", at_least=0)
    hedge_max_delay: float = setting(
        "hedging.maxDelay", DURATION, 2.0,
        "Cap of the hedge delay (not below `hedging.minDelay`); also the delay used before "
        "enough samples exist.", at_least=0)
    hedge_budget: float = setting(
        "hedging.budget", FLOAT, 0.10,
        "Hedges allowed per upload (over the last 1000 uploads).", at_least=0, at_most=1)
    hedge_min_samples: int = setting(
        "hedging.minSamples", INT, 20,
        "Latency samples needed before the quantile is trusted.", at_least=1)
    hedge_max_hedges: int = setting(
        "hedging.maxHedges", INT, 2,
        "Twins an upload may get: another starts each time the newest request has run one "
        "hedge delay without any success, each paid from the budget. The second one covers "
        "a first twin that lands in the tail too.",
        at_least=1, hint="hedging.enabled=false turns it off")
    # reading
    read_parallelism: int = setting(
        "read.parallelism", INT, 8, "Ranged reads in flight when a handle is read (recovery).",
        above=0)
    cache_dir: str | None = setting(
        "read.cacheDir", OPTIONAL_TEXT, None,
        "Local cache of downloaded changelog ranges; files are immutable, so entries never "
        "go stale.", shown_default="unset (no cache)")
    cache_max_bytes: int = setting(
        "read.cacheMaxSize", SIZE, 1024 * MIB,
        "Bound of that cache (LRU), per process.", above=0)
    # how to reach object storage (keys under spark.dstl.changelog.s3.)
    storage: StorageSettings = subsection(StorageSettings, "s3.")

    def check_together(self) -> None:
        if self.hedge_max_delay < self.hedge_min_delay:
            raise ConfigError(f"{self.key_of('hedge_max_delay')}: must not be below "
                              f"{self.key_of('hedge_min_delay')} ({self.hedge_min_delay!r}), "
                              f"got {self.hedge_max_delay!r}")

    @property
    def connection_needs(self) -> ConnectionNeeds:
        """Every in-flight upload with all its hedges, plus parallel reads, plus a margin."""
        wanted = ((1 + self.hedge_max_hedges) * self.max_concurrent_uploads
                  + self.read_parallelism + 4)
        return ConnectionNeeds(request_timeout=self.attempt_timeout, connections=wanted)

    @property
    def pool_connections(self) -> int:
        """The S3 connection pool size: `s3.maxPoolConnections`, else what the log needs."""
        return self.storage.pool_connections(self.connection_needs.connections)


CHANGELOG_SETTING_KEYS: dict[str, str] = setting_keys(ChangelogSettings)
"""Attribute path -> key below spark.dstl.changelog., e.g. "storage.s3_region": "s3.region"."""
