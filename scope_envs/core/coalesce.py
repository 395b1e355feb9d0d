"""Dynamic batching: requests that arrive one by one on an event loop, answered by batched calls.

A `Coalescer` wraps a blocking batched function (`generate(prompts, seeds)` of a local model, a
policy's `respond_batch`). Each caller awaits `submit(item)`; the first request starts a call on
the coalescer's worker thread with every request then waiting, and whatever arrives while that
call runs goes into the next one. So a model is never idle while requests wait, batches grow with
the load, and the event loop stays free for the requests of other backends (API replies).
One batched call runs at a time per coalescer: a local model is one compute resource.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class Coalescer(Generic[Item, Result]):
    """Answers `submit(item)` with `call(items)[i]`, batching the items that wait together.

    `call` runs on `executor` (a thread of its own by default); `max_batch` caps the items of one
    call. An exception raised by `call` is raised to every caller of that batch.
    """

    def __init__(
        self,
        call: Callable[[list[Item]], Sequence[Result]],
        *,
        max_batch: int | None = None,
        executor: Executor | None = None,
    ) -> None:
        if max_batch is not None and max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.call = call
        self.max_batch = max_batch
        self._own_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="scope-coalesce")
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._drain: asyncio.Task[None] | None = None
        self.calls = 0
        self.largest_batch = 0

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        # Runs after the tasks already scheduled in this iteration, so requests made ready together
        # (e.g. every episode at the start of a rollout) go into one call.
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        while self._waiting:
            size = self.max_batch or len(self._waiting)
            batch, self._waiting = self._waiting[:size], self._waiting[size:]
            batch = [(item, future) for item, future in batch if not future.done()]  # callers cancelled
            if not batch:
                continue
            self.calls += 1
            self.largest_batch = max(self.largest_batch, len(batch))
            try:
                results = await loop.run_in_executor(self.executor, self.call, [item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"a batched call answered {len(results)} of {len(batch)} requests")
            except Exception as error:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    def close(self) -> None:
        """Stops the worker thread this coalescer made (not an executor it was given)."""
        if self._own_executor:
            self.executor.shutdown(wait=True)
