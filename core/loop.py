"""An asyncio event loop on its own daemon thread, so synchronous callers can use async I/O."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from pyspark_dstl.core.errors import LoopClosedError, LoopUsageError

T = TypeVar("T")


class EventLoopThread:
    """Runs coroutines on a private loop; `run` blocks the caller, `submit` returns a Future."""

    def __init__(self, name: str = "dstl-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise LoopClosedError("the event loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for it; never call from the loop thread itself."""
        if self.in_loop_thread():
            coro.close()
            raise LoopUsageError("EventLoopThread.run called from its own loop thread; "
                                 "await the coroutine instead")
        return self.submit(coro).result(timeout)

    def call_soon(self, callback: Any, *args: Any) -> None:
        self._loop.call_soon_threadsafe(callback, *args)

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        if self.in_loop_thread():
            self._loop.stop()
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()
