"""Which S3/botocore/aiohttp failures are worth retrying: the retry policy's only input."""

from __future__ import annotations

import asyncio

import aiohttp
from botocore.exceptions import (
    ClientError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    SSLError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from pyspark_dstl.changelog.changelog_errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageError,
    TransientStorageError,
)

TRANSIENT_CODES = frozenset({
    "ConditionalRequestConflict", "InternalError", "ServiceUnavailable", "SlowDown",
    "RequestTimeout", "RequestTimeoutException", "RequestLimitExceeded",
    "BandwidthLimitExceeded", "TooManyRequestsException", "EC2ThrottledException",
    "PriorRequestNotComplete",
})
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def error_code(exc: ClientError) -> tuple[str, int]:
    """(S3 error code, HTTP status) of a botocore ClientError."""
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def map_s3_error(exc: BaseException, path: str, url: str, operation: str) -> StorageError:
    """The project error for `exc`; the caller raises it `from exc` so the cause stays."""
    where = f"S3 {operation} of {url!r}"
    if isinstance(exc, ClientError):
        return _map_client_error(exc, path, where)
    if isinstance(exc, SSLError):
        return PermanentStorageError(f"{where} failed: TLS error: {exc}", path)
    if isinstance(exc, HTTPClientError | BotoConnectionError | IncompleteReadError
                  | FlexibleChecksumError | aiohttp.ClientError | asyncio.TimeoutError
                  | TimeoutError | ConnectionError):
        return TransientStorageError(
            f"{where} failed ({type(exc).__name__}), may succeed later: {exc}", path)
    return PermanentStorageError(f"{where} failed ({type(exc).__name__}): {exc}", path)


def _map_client_error(exc: ClientError, path: str, where: str) -> StorageError:
    code, status = error_code(exc)
    detail = f"{code or 'no code'} (HTTP {status})"
    if status == 412 or code == "PreconditionFailed":
        return ObjectExistsError(f"{where}: already exists, {detail}", path)
    if code in TRANSIENT_CODES or code.startswith("Throttl") or status in TRANSIENT_STATUSES:
        return TransientStorageError(f"{where} failed, may succeed later: {detail}", path)
    if code in NOT_FOUND_CODES:
        return ObjectNotFoundError(f"{where}: no such object, {detail}", path)
    return PermanentStorageError(f"{where} failed: {detail}: {exc}", path)
