"""S3 failures injected at the proxy map to the errors the retry policy expects, and the proxy
itself forwards, counts and injects as documented."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from pyspark_dstl.changelog.changelog_errors import (
    ObjectExistsError,
    PermanentStorageError,
    StorageError,
    TransientStorageError,
)
from pyspark_dstl.changelog.storage import Storage, open_storage
from tests.support import FaultRule, MotoServer, RequestInfo, S3Env

# The client's read timeout (attempt_timeout) is short so "timeout" faults end quickly.
ATTEMPT_TIMEOUT = 0.5


@pytest.fixture
async def s3_store(s3: S3Env) -> AsyncIterator[Storage]:
    store = open_storage(s3.url, s3.options.with_changes(attempt_timeout=ATTEMPT_TIMEOUT))
    yield store
    await store.close()


async def create_failure(store: Storage, path: str = "f/x") -> StorageError:
    with pytest.raises(StorageError) as info:
        await store.put_if_absent(path, b"payload")
    assert info.value.path == path
    assert info.value.__cause__ is not None
    return info.value


# --- error mapping ------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (500, "InternalError"),
                                              (502, "BadGateway"), (504, "GatewayTimeout"),
                                              (409, "ConditionalRequestConflict"),
                                              (400, "RequestTimeout"), (429, "SlowDown")])
async def test_retryable_s3_answers_map_to_transient(s3: S3Env, s3_store: Storage,
                                                     status: int, code: str) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=status, code=code))
    error = await create_failure(s3_store)
    assert type(error) is TransientStorageError
    assert code in str(error)


@pytest.mark.parametrize(("status", "code"), [(403, "AccessDenied"), (400, "InvalidRequest"),
                                              (409, "BucketAlreadyOwnedByYou")])
async def test_other_4xx_answers_map_to_permanent(s3: S3Env, s3_store: Storage,
                                                  status: int, code: str) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=status, code=code))
    error = await create_failure(s3_store)
    assert type(error) is PermanentStorageError
    assert code in str(error)


async def test_injected_412_maps_to_object_exists(s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=412))
    error = await create_failure(s3_store)
    assert type(error) is ObjectExistsError


async def test_connection_reset_maps_to_transient_and_nothing_is_stored(
        s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("reset", method="PUT"))
    error = await create_failure(s3_store)
    assert type(error) is TransientStorageError
    assert s3.direct_get("f/x") is None


async def test_unanswered_request_times_out_as_transient_and_nothing_is_stored(
        s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("timeout", method="PUT", delay=20.0))
    started = time.monotonic()
    error = await create_failure(s3_store)
    elapsed = time.monotonic() - started
    assert type(error) is TransientStorageError
    # The behaviour under test is the client's own read timeout: it must give up long before
    # the proxy would (20 s). The bound is generous for a loaded 2-core machine.
    assert elapsed < 10.0
    assert s3.direct_get("f/x") is None


async def test_get_timeout_maps_to_transient(s3: S3Env, s3_store: Storage) -> None:
    await s3_store.put_if_absent("g", b"x")
    s3.proxy.add_rule(FaultRule("timeout", method="GET", delay=20.0))
    with pytest.raises(TransientStorageError):
        await s3_store.get("g")


async def test_lost_response_is_applied_yet_the_client_sees_transient(
        s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("lose_response", method="PUT"))
    error = await create_failure(s3_store)
    assert type(error) is TransientStorageError
    assert s3.direct_get("f/x") == b"payload"


async def test_a_failed_request_is_sent_exactly_once(s3: S3Env, s3_store: Storage) -> None:
    # aiohttp would silently resend an idempotent PUT on a dropped connection and the client
    # would then see a 412 for its own write; the store turns that resend off.
    s3.proxy.add_rule(FaultRule("lose_response", method="PUT", times=1))
    error = await create_failure(s3_store)
    assert type(error) is TransientStorageError
    assert s3.proxy.count("PUT") == 1


async def test_slow_response_is_applied_even_though_the_client_gave_up(
        s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("slow_response", method="PUT", delay=20.0))
    error = await create_failure(s3_store)
    assert type(error) is TransientStorageError
    assert s3.direct_get("f/x") == b"payload"


async def test_retry_after_a_lost_response_finds_the_object_held(
        s3: S3Env, s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("lose_response", method="PUT", times=1))
    await create_failure(s3_store)
    with pytest.raises(ObjectExistsError):
        await s3_store.put_if_absent("f/x", b"payload")
    assert await s3_store.holds("f/x", b"payload")


# --- the proxy itself ---------------------------------------------------------------------------


async def test_proxy_forwards_signed_requests_unchanged(s3: S3Env,
                                                        s3_store: Storage) -> None:
    body = bytes(range(256)) * 1000
    await s3_store.put_if_absent("through/proxy", body)
    assert s3.direct_get("through/proxy") == body
    assert await s3_store.get("through/proxy") == body


async def test_delay_rule_delays_the_request_and_then_forwards_it(s3: S3Env) -> None:
    # its own store: the shared one's short attempt timeout leaves a loaded machine too little
    # room beyond the delay
    store = open_storage(s3.url, s3.options.with_changes(attempt_timeout=30.0))
    s3.proxy.add_rule(FaultRule("delay", method="PUT", delay=0.3))
    started = time.monotonic()
    try:
        await store.put_if_absent("slow", b"x")
    finally:
        await store.close()
    # About time by nature: only a lower bound, which load cannot break.
    assert time.monotonic() - started >= 0.3
    assert s3.direct_get("slow") == b"x"


async def test_hold_rule_forwards_the_request_only_once_released(s3: S3Env) -> None:
    store = open_storage(s3.url, s3.options.with_changes(attempt_timeout=60.0))
    s3.proxy.add_rule(FaultRule("hold", method="PUT", delay=60.0, times=1))
    try:
        upload = asyncio.ensure_future(store.put_if_absent("held", b"x"))
        deadline = time.monotonic() + 30
        while s3.proxy.count("PUT", "held") == 0:
            assert time.monotonic() < deadline, "the upload never reached the proxy"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        assert not upload.done() and "held" not in s3.direct_keys()
        s3.proxy.release_held()
        await asyncio.wait_for(upload, 30)
    finally:
        await store.close()
    assert s3.direct_get("held") == b"x"


async def test_latency_model_adds_its_delay_to_every_request(s3: S3Env,
                                                             s3_store: Storage) -> None:
    seen: list[RequestInfo] = []

    def model(info: RequestInfo) -> float:
        seen.append(info)
        return 0.15

    s3.proxy.set_latency_model(model)
    started = time.monotonic()
    await s3_store.put_if_absent("lat", b"abc")
    await s3_store.get("lat")
    assert time.monotonic() - started >= 0.3  # two requests, 0.15 s each; lower bound only
    assert [(i.method, i.content_length) for i in seen] == [("PUT", 3), ("GET", None)]


async def test_rule_with_times_expires_after_that_many_matches(s3: S3Env,
                                                               s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", status=503, times=2))
    await create_failure(s3_store, "t")
    await create_failure(s3_store, "t")
    await s3_store.put_if_absent("t", b"third time")
    assert [r.status for r in s3.proxy.records("PUT")] == [503, 503, 200]


async def test_rule_applies_only_to_its_method_and_path(s3: S3Env,
                                                        s3_store: Storage) -> None:
    s3.proxy.add_rule(FaultRule("status", method="PUT", path_contains="/root/bad/", status=500))
    await s3_store.put_if_absent("good/x", b"x")
    assert await s3_store.get("good/x") == b"x"
    with pytest.raises(TransientStorageError):
        await s3_store.put_if_absent("bad/x", b"x")
    assert [r.fault for r in s3.proxy.log] == [None, None, "status"]


async def test_probability_draws_repeat_for_the_same_seed(s3: S3Env,
                                                          s3_store: Storage) -> None:
    async def pattern(run: int) -> list[bool]:
        s3.proxy.clear_rules()
        s3.proxy.set_seed(1234)
        s3.proxy.add_rule(FaultRule("status", method="HEAD", status=503, probability=0.5))
        failed = []
        for _ in range(16):
            try:
                await s3_store.exists(f"p{run}")
                failed.append(False)
            except TransientStorageError:
                failed.append(True)
        return failed

    first, second = await pattern(1), await pattern(2)
    assert first == second
    assert True in first and False in first


async def test_proxy_counts_requests_and_bytes_both_ways(s3: S3Env,
                                                         s3_store: Storage) -> None:
    body = b"b" * 123_457
    await s3_store.put_if_absent("c/1", body)
    await s3_store.put_if_absent("c/2", body[:1000])
    assert await s3_store.get("c/1", 0, 100) == body[:100]
    assert s3.proxy.count("PUT") == 2
    assert s3.proxy.count("PUT", "/root/c/2") == 1
    assert s3.proxy.bytes_in("PUT") == len(body) + 1000
    assert s3.proxy.bytes_out("GET") == 100
    assert s3.proxy.count() == 3


async def test_log_holds_client_requests_only(s3: S3Env, s3_store: Storage,
                                             moto_server: MotoServer) -> None:
    await s3_store.put_if_absent("only", b"x")
    moto_server.create_bucket()  # setup and inspection go straight to moto
    assert s3.direct_get("only") == b"x"
    assert [(r.method, r.path, r.status) for r in s3.proxy.log] == [
        ("PUT", f"/{s3.bucket}/root/only", 200)]


@pytest.mark.parametrize("bad", [dict(action="explode"), dict(action="status", probability=2.0),
                                 dict(action="status", times=0), dict(action="delay", delay=-1)])
def test_fault_rule_rejects_invalid_settings(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="FaultRule"):
        FaultRule(**bad)  # type: ignore[arg-type]
