"""ChangelogOptions: every knob of the durable short-term log, each declared once with its key."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark_dstl.core.errors import ConfigError
from pyspark_dstl.core.settings import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    OPTIONAL_INT,
    OPTIONAL_TEXT,
    SIZE,
    WORD,
    Options,
    Rule,
    Section,
    conf_keys,
    setting,
)

MB = 1024 * 1024
COMPRESSIONS = ("none", "zstd")
ADDRESSING_STYLES = ("auto", "path", "virtual")


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True)
class ChangelogOptions(Options):
    """Durations are seconds, sizes are bytes."""

    SECTION = Section("spark.dstl.changelog.", "changelog")

    # batching (FLIP-158 defaults)
    persist_delay: float = setting(
        "persistDelay", DURATION, 0.010,
        "How long a persist waits for other writers of the process so their changes share "
        "one upload.", at_least=0)
    persist_size_threshold: int = setting(
        "persistSizeThreshold", SIZE, 10 * MB,
        "Queued bytes that start an upload at once, without waiting for the delay.", above=0)
    preemptive_persist_threshold: int = setting(
        "preEmptivePersistThreshold", SIZE, 5 * MB,
        "A writer with more pending bytes uploads them before anybody asks, so a checkpoint "
        "has less to do.", above=0)
    max_in_flight_bytes: int = setting(
        "maxInFlight", SIZE, 100 * MB,
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
        "read.cacheMaxSize", SIZE, 1024 * MB,
        "Bound of that cache (LRU), per process.", above=0)
    # S3 (credentials: explicit, or the usual AWS environment / profile chain when None)
    s3_endpoint_url: str | None = setting(
        "s3.endpoint", OPTIONAL_TEXT, None, "S3 endpoint URL, for S3-compatible stores.",
        rule=Rule("be an http:// or https:// URL", _is_http_url), shown_default="unset (AWS)")
    s3_region: str | None = setting(
        "s3.region", OPTIONAL_TEXT, None, "S3 region.", shown_default="`us-east-1` when unset")
    s3_access_key_id: str | None = setting(
        "s3.accessKeyId", OPTIONAL_TEXT, None,
        "Explicit access key; when unset, the usual AWS chain (environment, profile, "
        "instance role). Prefer the environment to the Spark conf for secrets.")
    s3_secret_access_key: str | None = setting(
        "s3.secretAccessKey", OPTIONAL_TEXT, None, "Secret of the explicit access key.")
    s3_session_token: str | None = setting(
        "s3.sessionToken", OPTIONAL_TEXT, None,
        "Session token of temporary explicit credentials.")
    s3_addressing_style: str = setting(
        "s3.addressingStyle", WORD, "auto", "How the bucket appears in request URLs.",
        choices=ADDRESSING_STYLES)
    s3_max_pool_connections: int | None = setting(
        "s3.maxPoolConnections", OPTIONAL_INT, None,
        "HTTP connections per process: every upload plus its hedges plus parallel reads.",
        above=0, shown_default="`(1 + hedging.maxHedges) x maxConcurrentUploads + "
                               "read.parallelism + 4`")

    def check_together(self) -> None:
        if self.hedge_max_delay < self.hedge_min_delay:
            raise ConfigError(f"{self.key_of('hedge_max_delay')}: must not be below "
                              f"{self.key_of('hedge_min_delay')} ({self.hedge_min_delay!r}), "
                              f"got {self.hedge_max_delay!r}")

    @property
    def pool_connections(self) -> int:
        """Connections needed for every in-flight upload plus its hedges, plus parallel reads."""
        if self.s3_max_pool_connections is not None:
            return self.s3_max_pool_connections
        return ((1 + self.hedge_max_hedges) * self.max_concurrent_uploads
                + self.read_parallelism + 4)


CONF_KEYS: dict[str, str] = conf_keys(ChangelogOptions)
"""Field name -> key below spark.dstl.changelog."""
