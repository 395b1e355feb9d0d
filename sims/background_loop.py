"""`BackgroundLoop`: an asyncio event loop on a daemon thread of its own.

Objects bound to the loop they were made on (an async HTTP client and its connection pool, vLLM's
asynchronous engine) live on it, and callers submit coroutines from any thread or event loop:
a rollout's `asyncio.run`, a synchronous `respond`, another simulator's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    def __init__(self, name: str, *, setup: Callable[[], None] | None = None) -> None:
        """`setup` runs on the loop's thread, with the loop set as its current loop, before any
        coroutine: build the loop-bound objects there."""
        self.name = name
        self._setup = setup
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None  # a failed setup is not retried (an engine is costly)

    @property
    def running(self) -> bool:
        return self._loop is not None

    def submit(self, make: Callable[[], Awaitable[T]]) -> Future[T]:
        """Runs the coroutine `make()` on the loop (started on first use)."""
        loop = self._ensure()
        return asyncio.run_coroutine_threadsafe(make(), loop)  # type: ignore[arg-type]

    async def wait(self, make: Callable[[], Awaitable[T]]) -> T:
        """`submit`, awaited from any event loop: on this one, `make()` is awaited right there."""
        if self._loop is not None and asyncio.get_running_loop() is self._loop:
            return await make()
        return await asyncio.wrap_future(self.submit(make))

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """`submit`, waited for from synchronous code on another thread; cancelled if that wait is
        interrupted (Ctrl-C)."""
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError(f"{self.name}: run() from the loop's own thread would wait for itself")
        future = self.submit(make)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self, finish: Callable[[], Awaitable[Any]] | None = None, *, timeout: float = 10.0) -> None:
        """Runs `finish()` on the loop (closing a client), then stops the loop and its thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        if finish is not None:
            asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout=timeout)  # type: ignore[arg-type]
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=timeout)

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._failure is not None:
                raise RuntimeError(f"{self.name}: its setup failed earlier") from self._failure
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                failure: list[BaseException] = []

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    try:
                        if self._setup is not None:
                            self._setup()
                    except BaseException as error:  # reported to the caller that started the loop
                        failure.append(error)
                        ready.set()
                        loop.close()
                        return
                    ready.set()
                    loop.run_forever()
                    loop.close()

                self._thread = threading.Thread(target=run, name=f"scope-{self.name}", daemon=True)
                self._thread.start()
                ready.wait()
                if failure:
                    self._thread, self._failure = None, failure[0]
                    raise failure[0]
                self._loop = loop
            return self._loop
