"""moto's S3 API over real HTTP on 127.0.0.1, and the per-test S3 environment built on it.

moto's in-process mock cannot intercept aiobotocore, so the server mode is the only way to test
the real client. Setup (buckets, peeking at objects) goes to moto directly with boto3; the code
under test goes through the FaultProxy.
"""

from __future__ import annotations

import logging
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from pyspark_dstl.changelog.changelog_settings import ChangelogSettings
from pyspark_dstl.changelog.storage.storage_settings import StorageSettings
from tests.support.fault_proxy import FaultProxy

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


class MotoServer:
    """One moto server per test session on an ephemeral port."""

    def __init__(self) -> None:
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._endpoint: str | None = None
        self._admin: Any = None

    def start(self) -> MotoServer:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        self._server.start()
        host, port = self._server.get_host_and_port()
        self._endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def endpoint_url(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("MotoServer.start() was not called")
        return self._endpoint

    def reset(self) -> None:
        """Forget every bucket and object (moto's own reset endpoint).

        moto keeps its state per process, so this wipes what every other test set up too:
        call it at session boundaries only, never from a test that shares the session.
        """
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    @property
    def admin(self) -> Any:
        """A blocking boto3 client straight to moto, for setup and inspection only."""
        if self._admin is None:
            self._admin = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name=REGION,
                aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                config=Config(s3={"addressing_style": "path"},
                              retries={"total_max_attempts": 1}))
        return self._admin

    def create_bucket(self, prefix: str = "t") -> str:
        bucket = f"{prefix}-{uuid.uuid4().hex[:24]}"
        self.admin.create_bucket(Bucket=bucket)
        return bucket


@dataclass
class S3Env:
    """A fresh bucket for one test; `options` point the code under test at the proxy."""

    bucket: str
    url: str
    endpoint_url: str
    direct_endpoint_url: str
    options: ChangelogSettings
    proxy: FaultProxy
    moto: MotoServer
    prefix: str = "root"

    def key_of(self, path: str) -> str:
        return f"{self.prefix}/{path}"

    def query_settings(self) -> dict[str, Any]:
        """The changelog.s3.* settings (without the spark.dstl. prefix) that point a query's
        storage at the proxy, as a query's `conf` takes them."""
        storage = self.options.storage
        return {"changelog.s3.endpoint": storage.s3_endpoint_url,
                "changelog.s3.region": storage.s3_region,
                "changelog.s3.accessKeyId": storage.s3_access_key_id,
                "changelog.s3.secretAccessKey": storage.s3_secret_access_key,
                "changelog.s3.addressingStyle": "path"}

    def direct_get(self, path: str) -> bytes | None:
        """The object's bytes as moto holds them (bypassing the proxy), None if absent."""
        try:
            response = self.moto.admin.get_object(Bucket=self.bucket, Key=self.key_of(path))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                return None
            raise
        return bytes(response["Body"].read())

    def direct_put(self, path: str, data: bytes) -> None:
        """Place an object behind the store's back (e.g. an earlier writer's file)."""
        self.moto.admin.put_object(Bucket=self.bucket, Key=self.key_of(path), Body=data)

    def direct_keys(self) -> list[str]:
        """Every key under the root, relative to it, as moto lists them."""
        pages = self.moto.admin.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/")
        return sorted(item["Key"][len(self.prefix) + 1:]
                      for page in pages for item in page.get("Contents", []))


def make_s3_env(moto: MotoServer, proxy: FaultProxy, **option_changes: Any) -> S3Env:
    """Create a bucket through moto directly and describe it as seen through the proxy."""
    bucket = moto.create_bucket()
    storage = StorageSettings(
        s3_endpoint_url=proxy.url, s3_region=REGION, s3_access_key_id=ACCESS_KEY,
        s3_secret_access_key=SECRET_KEY, s3_addressing_style="path")
    options = ChangelogSettings(storage=storage, **option_changes)
    return S3Env(bucket=bucket, url=f"s3://{bucket}/root", endpoint_url=proxy.url,
                 direct_endpoint_url=moto.endpoint_url, options=options, proxy=proxy,
                 moto=moto)
