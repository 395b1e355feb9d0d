"""Dynamic batching of a local model: concurrent `arespond` calls answered by one batched call.

`DynamicBatching(HFSimulator(...))` gives a local model a native async form: every coroutine
that awaits `arespond` joins the requests waiting on the model, which are answered together by
the wrapped simulator's `respond_batch` (one `generate` over the batch, sampling unchanged: each
row with its own seeded generator) on a worker thread, while the requests arriving meanwhile
gather for the next call (`scope_envs.core.coalesce.Coalescer`). Per-episode asynchronous
rollouts (`scope_envs.core.async_rollout`) batch plain local simulators the same way by
themselves; this wrapper serves other asyncio callers, and caps a batch with `max_batch`.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from scope_envs.core.coalesce import Coalescer
from scope_envs.core.policy import PolicyError, Reply, Tools, View, reply_or_error
from sims.wrapper import SimulatorWrapper


class DynamicBatching(SimulatorWrapper):
    """`simulator` (anything with `respond_batch`) answering concurrent `arespond` calls in batches
    of at most `max_batch` (default: the simulator's own `batch_size`, else unbounded)."""

    def __init__(self, simulator: Any, *, max_batch: int | None = None) -> None:
        if not hasattr(simulator, "respond_batch"):
            raise TypeError(f"{type(simulator).__name__} has no respond_batch to batch requests into")
        super().__init__(simulator)
        self.max_batch = max_batch or getattr(simulator, "batch_size", None)
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch}")
        # one coalescer per event loop: its futures belong to that loop
        self._coalescers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Coalescer[Any, Reply]] = (
            weakref.WeakKeyDictionary()
        )

    async def arespond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        loop = asyncio.get_running_loop()
        coalescer = self._coalescers.get(loop)
        if coalescer is None:
            coalescer = self._coalescers[loop] = Coalescer(self._answer, max_batch=self.max_batch)
        reply = await coalescer.submit((messages, tools, seed))
        if isinstance(reply, PolicyError):
            raise reply
        return reply

    @property
    def batch_calls(self) -> int:
        """Batched calls made so far (over every event loop)."""
        return sum(coalescer.calls for coalescer in self._coalescers.values())

    def _answer(self, requests: list[tuple[View, Tools, int | None]]) -> list[Reply | PolicyError]:
        views, tools, seeds = zip(*requests, strict=True)
        try:
            return list(self.respond_batch(list(views), list(tools), seeds=list(seeds)))
        except PolicyError:  # one bad view fails only its own request
            return [reply_or_error(self, view, tool, seed) for view, tool, seed in requests]

    def close(self) -> None:
        for coalescer in list(self._coalescers.values()):
            coalescer.close()
        self._coalescers.clear()
        super().close()
