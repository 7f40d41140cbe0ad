"""A headless Chromium driven over the DevTools protocol (aiohttp's WebSocket client).

Loads one page, collects what it reported as errors (exceptions, console errors, log
entries of level error, failed requests), evaluates one expression and takes a screenshot.
Chromium comes from Debian's packages (scripts/ensure_chromium.sh installs it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--remote-debugging-address=127.0.0.1",
                  "--remote-debugging-port=0", "--window-size=1000,2400")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageVisit:
    errors: list[str] = field(default_factory=list)
    value: Any = None
    screenshot: bytes = b""


def visit(url: str, expression: str, timeout: float = 60.0) -> PageVisit:
    """Open `url` in a fresh headless Chromium, wait for load, evaluate `expression`."""
    return asyncio.run(asyncio.wait_for(_visit(url, expression), timeout))


async def _visit(url: str, expression: str) -> PageVisit:
    binary = chromium_path()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (scripts/ensure_chromium.sh)")
    with tempfile.TemporaryDirectory(prefix="dstl-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            port = await _devtools_port(process)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json()
                page = next(t for t in targets if t.get("type") == "page")
                async with http.ws_connect(page["webSocketDebuggerUrl"],
                                           max_msg_size=0) as ws:
                    return await _drive(ws, url, expression)
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def _devtools_port(process: asyncio.subprocess.Process) -> int:
    assert process.stderr is not None
    while True:
        line = (await process.stderr.readline()).decode(errors="replace")
        if not line:
            raise RuntimeError("chromium exited before its DevTools endpoint was up")
        found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
        if found:
            return int(found.group(1))


async def _drive(ws: Any, url: str, expression: str) -> PageVisit:
    visit = PageVisit()
    ids = itertools.count(1)
    replies: dict[int, asyncio.Future[Any]] = {}
    loaded = asyncio.Event()

    async def reader() -> None:
        async for message in ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in replies:
                replies.pop(data["id"]).set_result(data)
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Page.loadEventFired":
                loaded.set()
            elif method == "Runtime.exceptionThrown":
                visit.errors.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                visit.errors.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                visit.errors.append(params["entry"].get("text", "")[:500])
            elif method == "Network.loadingFailed":
                visit.errors.append(f"request failed: {params.get('errorText')}")

    async def call(method: str, **params: Any) -> Any:
        number = next(ids)
        replies[number] = asyncio.get_running_loop().create_future()
        await ws.send_str(json.dumps({"id": number, "method": method, "params": params}))
        reply = await replies[number]
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    task = asyncio.create_task(reader())
    try:
        for domain in ("Page", "Runtime", "Log", "Network"):
            await call(f"{domain}.enable")
        await call("Page.navigate", url=url)
        await loaded.wait()
        result = await call("Runtime.evaluate", expression=expression, returnByValue=True)
        visit.value = result["result"].get("value")
        shot = await call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        visit.screenshot = base64.b64decode(shot["data"])
    finally:
        task.cancel()
    return visit


def save_screenshot(visit: PageVisit, directory: Path) -> Path:
    path = directory / "report.png"
    path.write_bytes(visit.screenshot)
    return path
