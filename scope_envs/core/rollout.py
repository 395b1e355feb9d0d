"""The rollout protocol: play groups of episodes for given players, return token-level trajectories.

A rollout takes groups (`RolloutGroup`: a seed that picks the group's scenario, and the player of
each side, shared by the group's episodes) and plays `group_size` episodes of each, every
episode of every group stepped together so that each player answers all its waiting episodes in
one batched call. It returns one `Episode` per conversation with, for each player that keeps
trajectories, the exact samples it generated.

Three implementations exist and share this signature:

    collect(make_env, groups, *, group_size, split, key, before_turn=None) -> list[Episode]

* `collect_chat` here, for every `DialogueEnv`: chat turns through `DialogueBatch.play`; players
  that keep trajectories (`TracedPolicy`, e.g. a language model being trained) generate
  token-in, token-out;
* `collect_async` (`scope_envs.core.async_rollout`): the same episodes, each advancing as soon as
  its own reply arrives instead of in lockstep (`play_groups` is what the two share);
* a benchmark's own vectorized rollout, declared with `register_dialogue_env(..., rollout=...)`,
  for envs whose dynamics run as arrays (see `scope_envs.core.registration`).

`key` seeds what the rollout itself samples (batched policies); `before_turn` is called before
each batched turn (e.g. a crash point in tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scope_envs.core.batch import DialogueBatch
from scope_envs.core.dialogue import SIDES, DialogueEnv
from scope_envs.core.seeding import derive_seed


@dataclass(frozen=True)
class Sample:
    """One training sequence: `mask` is 1 on generated tokens, whose sampling log-probs are in `logprobs`."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    prompt_length: int

    def check(self) -> None:
        n = len(self.ids)
        assert len(self.mask) == n and len(self.logprobs) == n, "ids, mask and logprobs have one entry per token"
        assert 0 < self.prompt_length <= n and not any(self.mask[: self.prompt_length]), "the prompt is never trained"
        assert any(self.mask), "a sample trains at least one token"


@dataclass(frozen=True)
class ActSample(Sample):
    """A sample of discrete acts: `ids` are `[0, act_1, ..., act_T]` (position 0 is the empty
    prompt); `features[t]` and `allowed[t]` are what act `t + 1` was chosen from."""

    features: np.ndarray = None  # type: ignore[assignment]
    allowed: np.ndarray = None  # type: ignore[assignment]


@dataclass
class Episode:
    """One conversation of a rollout: outcome, and the samples of each side whose player kept them."""

    group: int
    scenario_id: str
    rewards: dict[str, float]
    reward_info: dict[str, dict[str, Any]]
    end_reason: str
    turns: int
    samples: dict[str, list[Sample]]
    generated_tokens: int
    tool_errors: dict[str, int]
    # the conversation, where an observer of the rollout kept it: log entries ({"side", "message",
    # and what the reply carried beside it}) and each side's final view, OpenAI format
    log: list[dict[str, Any]] | None = None
    messages: dict[str, list[dict[str, Any]]] | None = None

    def success(self, side: str) -> bool:
        return success_of(self.rewards[side], self.reward_info.get(side, {}).get("components", {}))


def success_of(reward: float, components: Mapping[str, Any]) -> bool:
    """A side's success: the benchmark's success component where it reports one, else a full reward."""
    return bool(components["success"] > 0) if "success" in components else reward >= 1.0 - 1e-9


@dataclass(frozen=True)
class RolloutGroup:
    """`seed` seeds the group's episodes and, unless `task_id` names it, picks its scenario;
    `players` maps each side to its policy."""

    seed: int
    players: Mapping[str, Any]
    task_id: str | None = None


Rollout = Callable[..., list[Episode]]


def scenarios_of(env: DialogueEnv, groups: Sequence[RolloutGroup], split: str) -> list[str]:
    """The scenario of each group: its task, or the one the env's own `reset` picks from its seed."""
    return [
        env.pick_scenario(
            group.seed, {"split": split} if group.task_id is None else {"task_id": group.task_id}
        ).scenario_id
        for group in groups
    ]


def collect_chat(
    make_env: Callable[[], DialogueEnv],
    groups: Sequence[RolloutGroup],
    *,
    group_size: int,
    split: str,
    key: Sequence[int] = (),
    before_turn: Callable[[], None] | None = None,
) -> list[Episode]:
    """Plays chat episodes; see the module docstring."""

    def lockstep(batch: DialogueBatch, player_of: Callable[[int, str], Any]) -> None:
        batch.play(player_of, before_turn=before_turn)

    return play_groups(make_env, groups, group_size=group_size, split=split, play=lockstep)


def play_groups(
    make_env: Callable[[], DialogueEnv],
    groups: Sequence[RolloutGroup],
    *,
    group_size: int,
    split: str,
    play: Callable[[DialogueBatch, Callable[[int, str], Any]], None],
) -> list[Episode]:
    """The episodes of `groups` (group-major, `group_size` each), reset from the group seeds and
    played to their end by `play(batch, player_of)`: lockstep (`DialogueBatch.play`) or per episode
    (`scope_envs.core.async_rollout`)."""
    seeds, options, group_of = [], [], []
    probe = make_env()
    scenarios = scenarios_of(probe, groups, split)
    probe.close()
    for index, (group, scenario) in enumerate(zip(groups, scenarios, strict=True)):
        for member in range(group_size):
            seeds.append(derive_seed(group.seed, member))
            options.append({"task_id": scenario})
            group_of.append(index)
    batch = DialogueBatch([make_env() for _ in seeds])
    batch.reset(seeds=seeds, options=options)
    try:
        play(batch, lambda index, side: groups[group_of[index]].players[side])
    finally:
        for env in batch.envs:
            env.close()
    episodes = []
    for index, result in enumerate(batch.results):
        assert result is not None
        episodes.append(
            Episode(
                group=group_of[index],
                scenario_id=result.scenario_id,
                rewards=dict(result.rewards),
                reward_info=result.reward_info,
                end_reason=result.end_reason,
                turns=result.turns,
                samples={side: trace.samples() for side, trace in batch.traces[index].items()},
                generated_tokens=batch.generated_tokens[index],
                tool_errors={side: tool_errors(result.messages[side]) for side in SIDES},
            )
        )
    return episodes


def tool_errors(messages: list[dict[str, Any]]) -> int:
    return sum(m["role"] == "tool" and str(m.get("content") or "").startswith("Error") for m in messages)
