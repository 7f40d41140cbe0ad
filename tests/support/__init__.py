"""Shared test harness: real S3 API (moto server) behind a fault-injecting proxy.

Fixtures (tests/conftest.py):

- ``moto_server`` (session): :class:`MotoServer` on 127.0.0.1, ephemeral port.
  ``endpoint_url``, ``reset()`` (POST /moto-api/reset), ``admin`` (blocking boto3 client,
  setup and inspection only), ``create_bucket()``.
- ``fault_proxy`` (session): :class:`FaultProxy` forwarding to moto. Every test starts with it
  transparent (no rules, no latency model, empty log).
- ``s3`` (function): :class:`S3Env` with a fresh bucket: ``url`` ("s3://<bucket>/root"),
  ``options`` (ChangelogSettings whose ``storage`` aims at the proxy: path addressing, dummy
  credentials),
  ``endpoint_url`` (the proxy), ``direct_endpoint_url`` (moto), ``proxy``, and
  ``direct_get/direct_put/direct_keys`` that bypass the proxy. For other options use
  ``s3.options.with_changes(...)``.
- ``storage_url`` (function, ids memory/file/s3): ``(url, options)`` for ``open_storage``.
- ``store`` (function, async): the opened Storage for ``storage_url``, closed afterwards.
- ``loop_thread`` (function): a started :class:`core.loop.EventLoopThread`, closed after.

Injecting faults::

    s3.proxy.add_rule(FaultRule("status", method="PUT", status=503, times=1))
    s3.proxy.add_rule(FaultRule("lose_response", method="PUT", path_contains="/root/a"))
    s3.proxy.add_rule(FaultRule("timeout", method="GET", delay=5.0))  # with a short
        # options.attempt_timeout the client times out; the request is never applied
    s3.proxy.set_latency_model(lambda info: rng.lognormvariate(-4, 1))
    s3.proxy.count("PUT", "/root/"), s3.proxy.bytes_in("PUT"), s3.proxy.log

Actions: delay, status, reset, lose_response, timeout, slow_response (see FaultRule). Rules are
tried in the order added; the first that matches (method, substring of path+query) and wins its
`probability` draw (seeded ``random.Random``, ``set_seed``) applies and uses one of its `times`.
The log holds client requests only; its counters are final before the client sees the end of
the answer, so a test may read it right after an awaited call returns. Requests the proxy
aborts have ``status`` None. The S3 store under test sends each request exactly once (no
botocore retries, no aiohttp resend), so counts at the proxy are exact.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.fault_proxy import FaultProxy, FaultRule, RequestInfo, RequestRecord
    from tests.support.moto_server import MotoServer, S3Env, make_s3_env

# Imported on first use: Spark's Python workers import processors from tests.support.* and
# should not pay for moto (about two seconds per fresh worker).
_HOMES = {
    "FaultProxy": "tests.support.fault_proxy",
    "FaultRule": "tests.support.fault_proxy",
    "RequestInfo": "tests.support.fault_proxy",
    "RequestRecord": "tests.support.fault_proxy",
    "MotoServer": "tests.support.moto_server",
    "S3Env": "tests.support.moto_server",
    "make_s3_env": "tests.support.moto_server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "FaultProxy",
    "FaultRule",
    "MotoServer",
    "RequestInfo",
    "RequestRecord",
    "S3Env",
    "make_s3_env",
]
