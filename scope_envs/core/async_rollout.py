"""Per-episode asynchronous rollouts: each episode advances as soon as its own reply arrives.

`collect_chat` steps every episode in lockstep: each round of turns waits for its slowest reply.
`collect_async` has the same signature and returns the same episodes, but plays each episode as
its own asyncio task on one `DialogueBatch`:

* a player with a native async form (the API backends: one shared client, connection pool and
  concurrency limit per backend, with their own timeouts and retries) is awaited per request, at
  most `in_flight` requests at a time per player (by default its own `concurrency`, else
  `DEFAULT_IN_FLIGHT`);
* an `instant` player (rule-based: scripted players) is called right on the event loop;
* a player that keeps trajectories (`TracedPolicy`, a model being trained) and any other player
  are answered through a `Coalescer`: the requests waiting on it are gathered into one batched call
  (`generate`, or `respond_all`) on a worker thread, and the requests that arrive during that
  call go into the next (dynamic batching). Traced players share one worker thread, since they may
  share one model (LoRA adapters over one base).

A reply depends only on its episode's view and seed (`derive_seed(episode seed, position)`), and
each episode's env and traces are its own, so a deterministic policy gives the same episodes
whatever order the replies come back in. Results are in group order, as from `collect_chat`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scope_envs.core.batch import DialogueBatch, Pending, TracedPolicy, respond_all
from scope_envs.core.coalesce import Coalescer
from scope_envs.core.dialogue import DialogueEnv
from scope_envs.core.policy import PolicyError, has_native_async, reply_or_error, run_beside
from scope_envs.core.rollout import Episode, RolloutGroup, play_groups

DEFAULT_IN_FLIGHT = 64  # requests awaited at once from a natively asynchronous player that sets no `concurrency`


def collect_async(
    make_env: Callable[[], DialogueEnv],
    groups: Sequence[RolloutGroup],
    *,
    group_size: int,
    split: str,
    key: Sequence[int] = (),
    before_turn: Callable[[], None] | None = None,
) -> list[Episode]:
    """The rollout protocol of `scope_envs.core.rollout`, played per episode (module docstring)."""

    def per_episode(batch: DialogueBatch, player_of: Callable[[int, str], Any]) -> None:
        players = [player for group in groups for player in group.players.values()]
        run_beside(players, lambda: play_async(batch, player_of, before_turn=before_turn))

    return play_groups(make_env, groups, group_size=group_size, split=split, play=per_episode)


async def play_async(
    batch: DialogueBatch,
    player_of: Callable[[int, str], Any],
    *,
    before_turn: Callable[[], None] | None = None,
    after_episode: Callable[[], None] | None = None,
    in_flight: int | None = None,
) -> None:
    """Plays every episode of `batch` (already reset) to its end, one task per episode;
    `player_of(index, side)` as in `DialogueBatch.play`, `before_turn` before each request,
    `after_episode` when an episode has ended; `in_flight` bounds the requests awaited at once
    per natively asynchronous player (module docstring).
    An exception other than a `PolicyError` (which fails only its episode) cancels the others."""
    if in_flight is not None and in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight}")
    answerers = Answerers(batch, in_flight)

    async def play(index: int) -> None:
        await play_episode(batch, index, player_of, answerers, before_turn)
        if after_episode is not None:
            after_episode()

    tasks = [asyncio.create_task(play(index)) for index in range(len(batch.envs))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        answerers.close()


async def play_episode(
    batch: DialogueBatch,
    index: int,
    player_of: Callable[[int, str], Any],
    answerers: Answerers,
    before_turn: Callable[[], None] | None = None,
) -> None:
    """Plays episode `index` of `batch` to its end, one reply at a time."""
    while (pending := batch.waiting(index)) is not None:
        side = batch.envs[index].to_speak
        player = player_of(index, side)
        if before_turn is not None:
            before_turn()
        answerer = answerers.of(player)
        if isinstance(answerer, asyncio.Semaphore):  # natively asynchronous
            async with answerer:
                reply = await areply_or_error(player, pending)
            batch.step(side, {index: reply})
        elif isinstance(answerer, TracedCoalescer):
            batch.record_generated(side, [pending], [await answerer.submit((side, pending))])
        elif answerer is None:  # instant
            batch.step(side, {index: reply_or_error(player, pending.messages, pending.tools, pending.seed)})
        else:
            batch.step(side, {index: await answerer.submit(pending)})


class TracedCoalescer(Coalescer[tuple[str, Pending], Any]):
    """The coalescer of a `TracedPolicy`: its requests are a side and a `Pending` view."""


class Answerers:
    """How each player of one rollout is asked: awaited directly under its in-flight bound (a
    semaphore; natively asynchronous), called on the loop (None; `instant` players), or through
    its coalescer. Players are classified once (a protocol `isinstance` is slow)."""

    def __init__(self, batch: DialogueBatch, in_flight: int | None = None) -> None:
        self.batch = batch
        self.in_flight = in_flight
        self._traced_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scope-generate")
        self._answerers: dict[int, Coalescer[Any, Any] | asyncio.Semaphore | None] = {}

    def of(self, player: Any) -> Coalescer[Any, Any] | asyncio.Semaphore | None:
        key = id(player)
        if key not in self._answerers:
            if isinstance(player, TracedPolicy):
                self._answerers[key] = self._traced(player)
            elif has_native_async(player):
                bound = self.in_flight or getattr(player, "concurrency", None) or DEFAULT_IN_FLIGHT
                self._answerers[key] = asyncio.Semaphore(bound)
            elif getattr(player, "instant", False):
                self._answerers[key] = None
            else:
                self._answerers[key] = self._chat(player)
        return self._answerers[key]

    def _traced(self, policy: TracedPolicy) -> TracedCoalescer:
        def generate(items: list[tuple[str, Pending]]) -> list[Any]:
            # Prompts are built on the generation thread: a tokenizer is not safe to share between threads.
            prompts = [self.batch.trace_prompts(policy, side, [pending])[0] for side, pending in items]
            return policy.generate(prompts, [pending.seed for _, pending in items])

        return TracedCoalescer(generate, executor=self._traced_thread)

    def _chat(self, policy: Any) -> Coalescer[Pending, Any]:
        def answer(waiting: list[Pending]) -> list[Any]:
            replies = respond_all(policy, waiting)
            return [replies[pending.index] for pending in waiting]

        return Coalescer(answer)

    def close(self) -> None:
        for answerer in self._answerers.values():
            if isinstance(answerer, Coalescer):
                answerer.close()
        self._traced_thread.shutdown(wait=True)


async def areply_or_error(policy: Any, pending: Pending) -> Any:
    """`reply_or_error`, awaited: the reply, or the `PolicyError` that fails only this episode."""
    try:
        return await policy.arespond(pending.messages, pending.tools or None, seed=pending.seed)
    except PolicyError as error:
        return error
