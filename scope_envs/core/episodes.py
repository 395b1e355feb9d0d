"""`run_episodes`: one episode in each env, one policy per side, played to the end.

When a player answers asynchronously (an API client), each episode is played as its own task
(`scope_envs.core.async_rollout`): an episode takes its next turn as soon as its own reply arrives,
rather than each round of turns waiting for its slowest reply (`DialogueBatch.play`). Both give the
same episodes for deterministic players. It lives above both, so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scope_envs.core.async_rollout import play_async
from scope_envs.core.batch import DialogueBatch, EpisodeResult
from scope_envs.core.dialogue import SIDES, DialogueEnv
from scope_envs.core.policy import any_native_async, run_beside
from scope_envs.core.specs import resolve_policy

ROLLOUTS = ("auto", "async", "lockstep")


def run_episodes(
    envs: Sequence[DialogueEnv],
    policies: Mapping[str, Any],
    *,
    seeds: Sequence[int | None] | int | None = None,
    options: Sequence[Mapping[str, Any] | None] | Mapping[str, Any] | None = None,
    progress: bool = False,
    rollout: str = "auto",
    in_flight: int | None = None,
) -> list[EpisodeResult]:
    """Plays one episode in each env to its end; `policies` maps each side to a policy or spec.

    `rollout`: `"async"`, each episode as its own task; `"lockstep"`, all episodes stepped
    together (`DialogueBatch.play`); `"auto"` (the default), async when a player answers
    asynchronously (`any_native_async`: the API backends), else lockstep. `in_flight` bounds the
    requests in flight per asynchronous player (default: its own `concurrency`, see
    `scope_envs.core.async_rollout`).
    """
    if rollout not in ROLLOUTS:
        raise ValueError(f"rollout must be one of {ROLLOUTS}, got {rollout!r}")
    resolved = {side: resolve_policy(policies[side], env=envs[0], side=side) for side in SIDES}
    batch = DialogueBatch(envs)
    batch.reset(seeds, options)
    bar = _progress_bar(len(envs)) if progress else None

    def show_progress() -> None:
        if bar is not None:
            bar.update(sum(result is not None for result in batch.results) - bar.n)

    def player_of(index: int, side: str) -> Any:
        return resolved[side]

    if rollout == "async" or (rollout == "auto" and any_native_async(resolved.values())):
        run_beside(
            resolved.values(),
            lambda: play_async(batch, player_of, after_episode=show_progress, in_flight=in_flight),
        )
    else:
        batch.play(player_of, after_round=show_progress)
    if bar is not None:
        bar.close()
    return [result for result in batch.results if result is not None]


def _progress_bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="episodes", unit="ep")
