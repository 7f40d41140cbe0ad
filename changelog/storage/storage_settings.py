"""StorageSettings: how to reach object storage (S3 endpoint, region, credentials, pool).

Kept apart from the changelog's batching, retry and hedging settings so a storage is built from
what it needs: these settings plus `ConnectionNeeds`, what the changelog's concurrency and
retry policy ask of the store's connections.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from pyspark_dstl.core.settings import (
    OPTIONAL_INT,
    OPTIONAL_TEXT,
    WORD,
    Rule,
    Section,
    Settings,
    setting,
)

ADDRESSING_STYLES = ("auto", "path", "virtual")
DEFAULT_REGION = "us-east-1"


def is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True)
class StorageSettings(Settings):
    """S3 connection settings; credentials left unset come from the usual AWS chain."""

    SECTION = Section("spark.dstl.changelog.s3.", "S3 storage")

    s3_endpoint_url: str | None = setting(
        "endpoint", OPTIONAL_TEXT, None, "S3 endpoint URL, for S3-compatible stores.",
        rule=Rule("be an http:// or https:// URL", is_http_url), shown_default="unset (AWS)")
    s3_region: str | None = setting(
        "region", OPTIONAL_TEXT, None, "S3 region.",
        shown_default=f"`{DEFAULT_REGION}` when unset")
    s3_access_key_id: str | None = setting(
        "accessKeyId", OPTIONAL_TEXT, None,
        "Explicit access key; when unset, the usual AWS chain (environment, profile, "
        "instance role). Prefer the environment to the Spark conf for secrets.")
    s3_secret_access_key: str | None = setting(
        "secretAccessKey", OPTIONAL_TEXT, None, "Secret of the explicit access key.")
    s3_session_token: str | None = setting(
        "sessionToken", OPTIONAL_TEXT, None, "Session token of temporary explicit credentials.")
    s3_addressing_style: str = setting(
        "addressingStyle", WORD, "auto", "How the bucket appears in request URLs.",
        choices=ADDRESSING_STYLES)
    s3_max_pool_connections: int | None = setting(
        "maxPoolConnections", OPTIONAL_INT, None,
        "HTTP connections per process: every upload plus its hedges plus parallel reads.",
        above=0, shown_default="`(1 + hedging.maxHedges) x maxConcurrentUploads + "
                               "read.parallelism + 4`")

    def pool_connections(self, wanted: int) -> int:
        """The connection pool size: the configured one, else what the changelog wants."""
        return self.s3_max_pool_connections or wanted


@dataclass(frozen=True)
class ConnectionNeeds:
    """What the changelog's retry policy and concurrency ask of a store's connections."""

    request_timeout: float = 10.0
    """Connect and read timeout of one request, seconds (one attempt of the retry policy)."""
    connections: int = 10
    """Requests that may be in flight at once."""
