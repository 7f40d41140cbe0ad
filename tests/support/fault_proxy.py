"""FaultProxy: a reverse proxy in front of moto that injects S3 failures on request.

moto has no fault injection, and the failures that matter for create-only uploads are network
shaped: slow answers, 503 SlowDown, reset connections and, worst of all, a write that was
applied while its answer was lost. The proxy runs on its own event loop thread, streams bodies
through, and is steered from tests through a thread-safe API (rules, latency model, log).
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from pyspark_dstl.core.loop import EventLoopThread

FaultAction = Literal["delay", "hold", "status", "reset", "lose_response", "timeout",
                      "slow_response"]
ACTIONS: tuple[str, ...] = ("delay", "hold", "status", "reset", "lose_response", "timeout",
                            "slow_response")
DEFAULT_CODES = {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey",
                 409: "ConditionalRequestConflict", 412: "PreconditionFailed",
                 429: "SlowDown", 500: "InternalError", 502: "BadGateway",
                 503: "SlowDown", 504: "GatewayTimeout"}
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "expect"})
CHUNK = 64 * 1024
POLL = 0.02


@dataclass(frozen=True)
class RequestInfo:
    """What a rule or the latency model sees of a request before it is handled."""

    method: str
    path: str
    query: str
    content_length: int | None

    @property
    def target(self) -> str:
        return f"{self.path}?{self.query}" if self.query else self.path


@dataclass(frozen=True)
class FaultRule:
    """One fault. `path_contains` matches the request target (path and query string).

    delay          sleep `delay` s, then forward (dropped if the client gave up meanwhile)
    hold           wait until the test calls `release_held()` (at most `delay` s, a
                   backstop), then forward as "delay" does: a window that lasts exactly as
                   long as the test needs it, however loaded the machine
    status         answer `status` with an S3 XML error (`code`, default by status), not
                   forwarded
    reset          drop the connection with a TCP reset, not forwarded
    lose_response  forward (moto applies it), then reset the connection: no answer
    timeout        hold up to `delay` s without answering (or until the client leaves), then
                   reset; not forwarded
    slow_response  forward at once (applied), answer only after `delay` s
    """

    action: FaultAction
    method: str | None = None
    path_contains: str | None = None
    times: int | None = None
    probability: float = 1.0
    delay: float = 0.0
    status: int = 503
    code: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"FaultRule.action must be one of {ACTIONS}, got {self.action!r}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"FaultRule.probability must be in [0, 1], got {self.probability}")
        if self.times is not None and self.times < 1:
            raise ValueError(f"FaultRule.times must be at least 1 or None, got {self.times}")
        if self.delay < 0:
            raise ValueError(f"FaultRule.delay must not be negative, got {self.delay}")

    def matches(self, info: RequestInfo) -> bool:
        if self.method is not None and self.method.upper() != info.method:
            return False
        return self.path_contains is None or self.path_contains in info.target

    @property
    def error_code(self) -> str:
        return self.code or DEFAULT_CODES.get(self.status, "InternalError")


@dataclass(frozen=True)
class RequestRecord:
    """One client request. `status` is what the client received (None: connection dropped);
    `duration` is None while the request is still being handled."""

    method: str
    path: str
    query: str
    status: int | None
    bytes_in: int
    bytes_out: int
    started: float
    duration: float | None
    fault: str | None


class _Entry:
    """The mutable log entry of a request in flight; counters are final before the client
    can see the end of the answer, so a test reading the log right after a call is exact."""

    def __init__(self, info: RequestInfo) -> None:
        self.info = info
        self.status: int | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.started = time.monotonic()
        self.duration: float | None = None
        self.fault: str | None = None

    def record(self) -> RequestRecord:
        return RequestRecord(self.info.method, self.info.path, self.info.query, self.status,
                             self.bytes_in, self.bytes_out, self.started, self.duration,
                             self.fault)


class _ActiveRule:
    def __init__(self, rule: FaultRule) -> None:
        self.rule = rule
        self.remaining = rule.times


class FaultControl:
    """What to inject and what was seen; every method is safe from any thread."""

    def __init__(self, seed: int = 0) -> None:
        self._lock = threading.Lock()
        self._rules: list[_ActiveRule] = []
        self._log: list[_Entry] = []
        self._random = random.Random(seed)
        self._latency: Callable[[RequestInfo], float] | None = None
        self._active = 0
        self._released = threading.Event()

    def add_rule(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(_ActiveRule(rule))
            if rule.action == "hold":
                self._released.clear()

    def release_held(self) -> None:
        """Let every request a "hold" rule holds (and any it holds later) go on."""
        self._released.set()

    def clear_rules(self) -> None:
        """No rules from now on; requests a "hold" rule still holds go on."""
        with self._lock:
            self._rules.clear()
        self._released.set()

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()

    def set_seed(self, seed: int) -> None:
        with self._lock:
            self._random.seed(seed)

    def set_latency_model(self, fn: Callable[[RequestInfo], float] | None) -> None:
        """Extra seconds before each request is handled, e.g. drawn from a heavy tail."""
        with self._lock:
            self._latency = fn

    def reset(self) -> None:
        """Back to transparent: no rules, no latency model, empty log, nothing held (a test
        that failed before releasing its hold does not hold the next one's requests)."""
        with self._lock:
            self._rules.clear()
            self._log.clear()
            self._latency = None
        self._released.set()

    @property
    def log(self) -> list[RequestRecord]:
        with self._lock:
            return [entry.record() for entry in self._log]

    def records(self, method: str | None = None,
                path_contains: str | None = None) -> list[RequestRecord]:
        return [r for r in self.log
                if (method is None or r.method == method.upper())
                and (path_contains is None
                     or path_contains in (f"{r.path}?{r.query}" if r.query else r.path))]

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        return len(self.records(method, path_contains))

    def bytes_in(self, method: str | None = None, path_contains: str | None = None) -> int:
        return sum(r.bytes_in for r in self.records(method, path_contains))

    def bytes_out(self, method: str | None = None, path_contains: str | None = None) -> int:
        return sum(r.bytes_out for r in self.records(method, path_contains))

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no request is being handled; False if that did not happen in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._active == 0:
                    return True
            time.sleep(POLL)
        return False

    def _begin(self, info: RequestInfo) -> tuple[_Entry, FaultRule | None, float]:
        """Log the request; pick the first matching rule that fires and the extra latency."""
        entry = _Entry(info)
        with self._lock:
            self._log.append(entry)
            self._active += 1
            chosen: FaultRule | None = None
            for active in self._rules:
                if active.remaining == 0 or not active.rule.matches(info):
                    continue
                if active.rule.probability < 1.0 and \
                        self._random.random() >= active.rule.probability:
                    continue
                if active.remaining is not None:
                    active.remaining -= 1
                chosen = active.rule
                break
            latency = self._latency
        entry.fault = chosen.action if chosen else None
        return entry, chosen, latency(info) if latency else 0.0

    def _end(self, entry: _Entry) -> None:
        entry.duration = time.monotonic() - entry.started
        with self._lock:
            self._active -= 1


class FaultProxy(FaultControl):
    """Reverse proxy on 127.0.0.1:<ephemeral> forwarding to `upstream_url`."""

    def __init__(self, upstream_url: str, seed: int = 0) -> None:
        super().__init__(seed)
        self.upstream_url = upstream_url.rstrip("/")
        self._port: int | None = None
        self._thread: EventLoopThread | None = None
        self._site: asyncio.AbstractServer | None = None
        self._server: web.Server | None = None
        self._session: aiohttp.ClientSession | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread = EventLoopThread(name="fault-proxy")
        self._thread.run(self._start())
        return self

    async def _start(self) -> None:
        self._server = web.Server(self._handle)
        self._site = await asyncio.get_running_loop().create_server(
            self._server, "127.0.0.1", 0)
        self._port = self._site.sockets[0].getsockname()[1]
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            skip_auto_headers=("Content-Type", "User-Agent", "Accept", "Accept-Encoding"),
            timeout=aiohttp.ClientTimeout(total=None),
        )

    def stop(self) -> None:
        if self._thread is None:
            return
        self._thread.run(self._stop())
        self._thread.close()
        self._thread = None

    async def _stop(self) -> None:
        if self._site is not None:
            self._site.close()
        if self._server is not None:
            await self._server.shutdown(1.0)
        if self._session is not None:
            await self._session.close()
        leftovers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("FaultProxy.start() was not called")
        return f"http://127.0.0.1:{self._port}"

    # --- request handling (proxy loop) ------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        length = request.content_length
        info = RequestInfo(request.method, request.path, request.query_string, length)
        entry, rule, latency = self._begin(info)
        try:
            if latency > 0:
                await asyncio.sleep(latency)
            return await self._apply(request, entry, rule)
        finally:
            self._end(entry)

    async def _apply(self, request: web.BaseRequest, entry: _Entry,
                     rule: FaultRule | None) -> web.StreamResponse:
        if rule is None:
            return await self._forward(request, entry)
        if rule.action == "delay":
            await asyncio.sleep(rule.delay)
            return await self._forward(request, entry)
        if rule.action == "hold":
            deadline = time.monotonic() + rule.delay
            while not self._released.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(POLL)
            return await self._forward(request, entry)
        if rule.action == "status":
            return await self._error(request, entry, rule)
        if rule.action == "reset":
            return _abort(request)
        if rule.action == "timeout":
            await _hold(request, rule.delay)
            return _abort(request)
        if rule.action == "lose_response":
            return await self._forward(request, entry, lose_response=True)
        return await self._forward(request, entry, answer_delay=rule.delay)

    async def _error(self, request: web.BaseRequest, entry: _Entry,
                     rule: FaultRule) -> web.StreamResponse:
        expects_continue = request.headers.get("Expect", "").lower() == "100-continue"
        if not expects_continue:
            async for chunk in request.content.iter_chunked(CHUNK):
                entry.bytes_in += len(chunk)
        body = b"" if request.method == "HEAD" else (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{rule.error_code}</Code><Message>injected by FaultProxy</Message>"
            f"<RequestId>fault-{id(entry):x}</RequestId></Error>").encode()
        response = web.Response(status=rule.status, body=body or None,
                                content_type="application/xml")
        if expects_continue:
            response.force_close()  # the body was never read: the connection is not reusable
        entry.status = rule.status
        entry.bytes_out = len(body)
        return response

    async def _forward(self, request: web.BaseRequest, entry: _Entry, *,
                       lose_response: bool = False,
                       answer_delay: float = 0.0) -> web.StreamResponse:
        if _client_gone(request):
            return _abort(request)
        if request.headers.get("Expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        assert self._session is not None
        headers = CIMultiDict((k, v) for k, v in request.headers.items()
                              if k.lower() not in HOP_BY_HOP)
        data = _count_body(request, entry) if request.body_exists else None
        try:
            async with self._session.request(
                    request.method, self.upstream_url + request.raw_path, headers=headers,
                    data=data, allow_redirects=False) as upstream:
                if lose_response:
                    await upstream.read()
                    return _abort(request)
                if answer_delay > 0:
                    await upstream.read()  # applied upstream; the client waits for the answer
                    await _hold(request, answer_delay)
                    if _client_gone(request):
                        return _abort(request)
                return await self._relay(request, entry, upstream)
        except (aiohttp.ClientError, OSError) as exc:
            if _client_gone(request):
                return _abort(request)
            entry.status = 502
            return web.Response(status=502, text=f"FaultProxy: upstream failed: {exc}")

    async def _relay(self, request: web.BaseRequest, entry: _Entry,
                     upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in HOP_BY_HOP:
                response.headers.add(key, value)
        entry.status = upstream.status
        await response.prepare(request)
        async for chunk in upstream.content.iter_chunked(CHUNK):
            entry.bytes_out += len(chunk)
            await response.write(chunk)
        await response.write_eof()
        return response


async def _count_body(request: web.BaseRequest, entry: _Entry) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(CHUNK):
        entry.bytes_in += len(chunk)
        yield chunk


def _client_gone(request: web.BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _hold(request: web.BaseRequest, seconds: float) -> None:
    """Wait `seconds`, or less if the client closes the connection first."""
    deadline = time.monotonic() + seconds
    while not _client_gone(request):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        await asyncio.sleep(min(POLL, left))


def _abort(request: web.BaseRequest) -> web.StreamResponse:
    """Reset the connection (RST, not FIN) so the client gets no answer at all."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=499)  # never sent: aiohttp drops it on the closed transport
