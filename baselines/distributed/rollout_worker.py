"""A rollout worker: an env factory and a rollout function in a process of its own (a Ray actor)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from baselines.training.episodes import observed
from baselines.training.rollouts import DEFAULT_ROLLOUT, ROLLOUTS
from scope_envs.core.dialogue import DialogueEnv
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import Episode, RolloutGroup
from scope_envs.core.specs import make_policy

EnvSource = str | Callable[[], DialogueEnv]


@dataclass(frozen=True)
class FromSpec:
    """A player that a rollout worker builds from its spec (`make_policy(spec, side=side, **kwargs)`)
    at its first use and keeps: for players that do not pickle, such as API clients with their
    connection pools. Only rollout workers resolve it (`RayRollout.play_remote`)."""

    spec: str
    side: str
    kwargs: tuple[tuple[str, Any], ...] = ()


class RolloutWorker:
    """Builds its envs from a registered env name and kwargs (or a picklable env factory) and plays
    the groups it is sent with the env's own vectorized rollout, else chat episodes (`rollout`:
    "lockstep", the default everywhere, or "async"). It keeps no state between calls: a restarted
    worker plays a group the same way, since everything random in it derives from the group's seed
    and the task's key."""

    def __init__(
        self,
        env: EnvSource,
        env_kwargs: dict[str, Any] | None = None,
        rollout: str = DEFAULT_ROLLOUT,
        *,
        observe: bool = False,
    ) -> None:
        """`observe`: every episode keeps its conversation (`baselines.training.episodes.observed`), played here."""
        if rollout not in ROLLOUTS:
            raise ValueError(f"rollout must be one of {tuple(ROLLOUTS)}, got {rollout!r}")
        self.env, self.env_kwargs = env, dict(env_kwargs or {})
        own = find_env(env).rollout_function() if isinstance(env, str) else None
        self.play = own or ROLLOUTS[rollout]
        if observe:
            self.play = observed(self.play, chat=own is None)
        self.built: dict[FromSpec, Any] = {}

    def make_env(self) -> DialogueEnv:
        return find_env(self.env).make(**self.env_kwargs) if isinstance(self.env, str) else self.env(**self.env_kwargs)

    def play_groups(
        self,
        groups: Sequence[RolloutGroup],
        indices: Sequence[int],
        *,
        group_size: int,
        split: str,
        key: Sequence[int],
    ) -> list[Episode]:
        """The episodes of `groups[i]` for i in `indices`, played as one rollout whose key is
        `(*key, indices[0])`; each episode's `group` is its index in `groups`."""
        mine = [
            replace(groups[i], players={side: self.player(p) for side, p in groups[i].players.items()}) for i in indices
        ]
        episodes = self.play(self.make_env, mine, group_size=group_size, split=split, key=(*key, indices[0]))
        for episode in episodes:
            episode.group = indices[episode.group]
        return episodes

    def player(self, player: Any) -> Any:
        if not isinstance(player, FromSpec):
            return player
        if player not in self.built:
            env = self.make_env()
            self.built[player] = make_policy(player.spec, env=env, side=player.side, **dict(player.kwargs))
            env.close()
        return self.built[player]

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()
