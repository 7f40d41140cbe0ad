"""S3Storage: native aiobotocore client; create-only with `IfNoneMatch="*"`, no hidden retries.

Exactly one layer may retry (the uploader), so botocore's retries are off and aiohttp's silent
resend of idempotent requests on a dropped keep-alive connection is off too: a PUT whose answer
was lost must surface as a transient error, not come back as a 412 from its own resend.
The client is created on first use inside the running loop and belongs to that loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.httpsession import AIOHTTPSession
from aiobotocore.session import AioSession, get_session
from botocore.exceptions import ClientError
from botocore.loaders import Loader, create_loader

from pyspark_dstl.changelog.changelog_errors import (
    ChangelogError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageError,
)
from pyspark_dstl.changelog.storage.base import (
    ObjectInfo,
    Storage,
    check_key,
    check_range,
    md5_hex,
)
from pyspark_dstl.changelog.storage.errors_map import error_code, map_s3_error
from pyspark_dstl.changelog.storage.storage_settings import (
    DEFAULT_REGION,
    ConnectionNeeds,
    StorageSettings,
)

DELETE_BATCH = 1000
T = TypeVar("T")

_LOADER: Loader | None = None
_LOADER_LOCK = threading.Lock()


def _shared_loader() -> Loader:
    """One botocore data loader per process: parsing the S3 model costs ~0.1 s per session."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = create_loader()
        return _LOADER


class NoResendHTTPSession(AIOHTTPSession):
    """aiobotocore's HTTP session without aiohttp's automatic resend of idempotent requests."""

    async def _get_session(self, proxy_url: str | None) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = await super()._get_session(proxy_url)
        if not hasattr(session, "_retry_connection"):
            raise ChangelogError("this aiohttp version has no _retry_connection switch; "
                                 "S3Storage cannot turn off its hidden resends")
        session._retry_connection = False
        return session


def _no_expect_continue(params: dict[str, Any], **_: Any) -> None:
    """Send request bodies at once: waiting for "100 Continue" costs a round trip per upload, and
    a server that never sends it stalls the request beyond the read timeout."""
    params.get("headers", {}).pop("Expect", None)


class S3Storage(Storage):
    """`s3://bucket[/prefix]`; keys are stored as `prefix/key`."""

    def __init__(self, bucket: str, prefix: str, storage: StorageSettings | None = None,
                 needs: ConnectionNeeds | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        self.root_url = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.storage = storage or StorageSettings()
        self.needs = needs or ConnectionNeeds()
        self.delete_batch = DELETE_BATCH  # keys per DeleteObjects request (S3's maximum)
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stack = contextlib.AsyncExitStack()
        self._lock = threading.Lock()
        self._open_lock: asyncio.Lock | None = None
        self._closed = False

    def _key(self, path: str) -> str:
        check_key(path)
        return f"{self.prefix}/{path}" if self.prefix else path

    def _config(self) -> AioConfig:
        timeout = self.needs.request_timeout
        return AioConfig(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=timeout,
            read_timeout=timeout,
            max_pool_connections=self.storage.pool_connections(self.needs.connections),
            s3={"addressing_style": self.storage.s3_addressing_style},
            http_session_cls=NoResendHTTPSession,
        )

    async def _get_client(self) -> Any:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise PermanentStorageError(f"S3 store {self.root_url!r} is closed")
            if self._loop is None:
                self._loop = loop
                self._open_lock = asyncio.Lock()
        if self._loop is not loop:
            raise ChangelogError(f"S3 store {self.root_url!r} was first used on another event "
                                 "loop; its client belongs to that loop")
        if self._client is not None:
            return self._client
        assert self._open_lock is not None
        async with self._open_lock:
            if self._client is None:
                try:
                    client = await self._stack.enter_async_context(self._new_client())
                except Exception as exc:
                    raise PermanentStorageError(
                        f"cannot create the S3 client for {self.root_url!r} (endpoint "
                        f"{self.storage.s3_endpoint_url!r}): {exc}") from exc
                client.meta.events.register_last("before-call.s3", _no_expect_continue)
                self._client = client
        return self._client

    def _new_client(self) -> Any:
        session: AioSession = get_session()
        session.register_component("data_loader", _shared_loader())
        opts = self.storage
        return session.create_client(
            "s3",
            endpoint_url=opts.s3_endpoint_url,
            region_name=opts.s3_region or DEFAULT_REGION,
            aws_access_key_id=opts.s3_access_key_id,
            aws_secret_access_key=opts.s3_secret_access_key,
            aws_session_token=opts.s3_session_token,
            config=self._config(),
        )

    async def _call(self, path: str, operation: str,
                    fn: Callable[[Any], Awaitable[T]]) -> T:
        client = await self._get_client()
        try:
            return await fn(client)
        except StorageError:
            raise
        except Exception as exc:
            raise map_s3_error(exc, path, self.url_of(path), operation) from exc

    async def put_if_absent(self, path: str, data: bytes) -> str:
        key = self._key(path)

        async def put(client: Any) -> str:
            response = await client.put_object(Bucket=self.bucket, Key=key, Body=data,
                                               IfNoneMatch="*")
            return str(response.get("ETag", "")).strip('"') or md5_hex(data)

        return await self._call(path, "create", put)

    async def copy(self, source: str, dest: str) -> None:
        """CopyObject (a PUT with x-amz-copy-source): the bytes never leave the server.
        Create-only through `IfNoneMatch="*"`, which S3 enforces atomically; a HEAD of `dest`
        first refuses an existing one also on servers that ignore the condition on a copy
        (moto), where only a copy racing another for the same name could still replace it."""
        source_key, dest_key = self._key(source), self._key(dest)
        try:
            await self.head(dest)
        except ObjectNotFoundError:
            pass
        else:
            raise ObjectExistsError(f"object {self.url_of(dest)!r} already exists", dest)

        async def copy(client: Any) -> None:
            try:
                await client.copy_object(Bucket=self.bucket, Key=dest_key, IfNoneMatch="*",
                                         CopySource={"Bucket": self.bucket, "Key": source_key})
            except ClientError as exc:
                if error_code(exc)[0] in ("NoSuchKey", "NotFound"):
                    raise ObjectNotFoundError(f"S3 copy to {self.url_of(dest)!r}: no source "
                                              f"object {self.url_of(source)!r}", source) from exc
                raise

        await self._call(dest, "create", copy)

    async def get(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        key = self._key(path)
        check_range(path, start, end)
        if end is not None and end == start:
            await self.head(path)  # an empty range still needs the object to exist
            return b""
        extra: dict[str, str] = {}
        if start > 0 or end is not None:
            extra["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))

        async def read(client: Any) -> bytes:
            try:
                response = await client.get_object(Bucket=self.bucket, Key=key, **extra)
            except ClientError as exc:
                if error_code(exc)[1] == 416:
                    return b""  # the range starts at or past the end: no bytes there
                raise
            async with response["Body"] as body:
                return bytes(await body.read())

        return await self._call(path, "get", read)

    async def head(self, path: str) -> ObjectInfo:
        key = self._key(path)

        async def head(client: Any) -> ObjectInfo:
            response = await client.head_object(Bucket=self.bucket, Key=key)
            etag = str(response.get("ETag", "")).strip('"') or None
            return ObjectInfo(path, int(response["ContentLength"]), etag)

        return await self._call(path, "head", head)

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        base = f"{self.prefix}/" if self.prefix else ""

        async def list_all(client: Any) -> list[ObjectInfo]:
            found: list[ObjectInfo] = []
            paginator = client.get_paginator("list_objects_v2")
            async for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix):
                for item in page.get("Contents", []):
                    etag = str(item.get("ETag", "")).strip('"') or None
                    found.append(ObjectInfo(item["Key"][len(base):], int(item["Size"]), etag))
            found.sort(key=lambda info: info.path)
            return found

        return await self._call(prefix, "list", list_all)

    async def delete(self, path: str) -> None:
        key = self._key(path)

        async def delete(client: Any) -> None:
            await client.delete_object(Bucket=self.bucket, Key=key)

        await self._call(path, "delete", delete)

    async def delete_many(self, paths: builtins.list[str]) -> None:
        keys = [self._key(path) for path in paths]
        for first in range(0, len(keys), self.delete_batch):
            chunk = keys[first:first + self.delete_batch]
            await self._call(paths[first], "delete", partial(self._delete_chunk, keys=chunk))

    async def _delete_chunk(self, client: Any, keys: builtins.list[str]) -> None:
        response = await client.delete_objects(
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True})
        errors = response.get("Errors", [])
        if errors:
            first = errors[0]
            path = str(first.get("Key", ""))[len(self.prefix) + 1 if self.prefix else 0:]
            cause = ClientError(
                {"Error": {"Code": first.get("Code", ""), "Message": first.get("Message", "")}},
                "DeleteObjects")
            error = map_s3_error(cause, path, self.url_of(path), "delete")
            raise type(error)(f"{error} ({len(errors)} of {len(keys)} keys failed)",
                              path) from cause

    async def close(self) -> None:
        with self._lock:
            self._closed = True
        if self._client is None:
            return
        if self._loop is not asyncio.get_running_loop():
            raise ChangelogError(f"S3 store {self.root_url!r} must be closed on the event loop "
                                 "that first used it")
        self._client = None
        await self._stack.aclose()
