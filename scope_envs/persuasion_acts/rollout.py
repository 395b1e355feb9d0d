"""The testbed's vectorized rollout: every episode of every group in one `ActsBatch`.

It implements the rollout protocol of `scope_envs.core.rollout` (declared at registration, as
Gymnasium declares a `vector_entry_point`). Scenarios are chosen exactly as for chat episodes (the
env's own `reset` with the group's seed); then, turn by turn, each player acts for all the live
episodes it plays at once through `act(features, mask, rng)`. The turns of trainable players
(those with `sequence_logprobs`) are kept as `ActSample`s, with the features and allowed acts they
were chosen from, for the update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scope_envs.core.dialogue import AGENT, SIDES, USER, user_components, user_reward_from
from scope_envs.core.rollout import ActSample, Episode, RolloutGroup, scenarios_of
from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.env import PersuasionActsEnv


def collect(
    make_env: Callable[[], PersuasionActsEnv],
    groups: Sequence[RolloutGroup],
    *,
    group_size: int,
    split: str,
    key: Sequence[int] = (),
    before_turn: Callable[[], None] | None = None,
) -> list[Episode]:
    env = make_env()
    scenarios = [scenario for scenario in scenarios_of(env, groups, split) for _ in range(group_size)]
    env.close()
    group_of = np.repeat(np.arange(len(groups)), group_size)
    batch = ActsBatch(np.array([env.persona(s) for s in scenarios]), env.exchanges, env.rules)
    rng = np.random.default_rng([*key, 0xAC7])
    trace: dict[str, list[list[tuple[np.ndarray, np.ndarray, int, float]]]] = {
        side: [[] for _ in scenarios] for side in SIDES
    }
    while batch.live.any():
        for side in SIDES:
            waiting = batch.awaiting_user if side == USER else batch.live & ~batch.awaiting_user
            pending = np.flatnonzero(waiting)
            by_player: dict[int, tuple[Any, list[int]]] = {}
            for group in np.unique(group_of[pending]):
                player = groups[group].players[side]
                by_player.setdefault(id(player), (player, []))[1].append(group)
            for player, played in by_player.values():
                if not hasattr(player, "act"):
                    raise TypeError(
                        f"{getattr(player, 'name', type(player).__name__)} cannot play an act-level env: it needs "
                        "a vectorized act(features, mask, rng), as simulator families and act-level policies have"
                    )
                if before_turn is not None:
                    before_turn()
                chosen = np.zeros(len(groups), bool)
                chosen[played] = True
                index = pending[chosen[group_of[pending]]]
                if side == AGENT:
                    features = batch.agent_features(index)
                    allowed = np.ones((len(index), env.action_space(AGENT).n), bool)
                else:
                    features, allowed = batch.user_features(index)
                acts, logprobs = player.act(features, allowed, rng)
                if hasattr(player, "sequence_logprobs"):
                    for row, episode in enumerate(index):
                        trace[side][episode].append((features[row], allowed[row], int(acts[row]), float(logprobs[row])))
                (batch.step_agent if side == AGENT else batch.step_user)(index, acts)
    rewards, donations = batch.agent_reward(), batch.donation
    user_rewards = user_reward_from(rewards, env.user_reward)
    episodes = []
    for index, scenario in enumerate(scenarios):
        components = {"donation": float(donations[index]), "success": float(donations[index] > 0)}
        episodes.append(
            Episode(
                group=int(group_of[index]),
                scenario_id=scenario,
                rewards={AGENT: float(rewards[index]), USER: float(user_rewards[index])},
                reward_info={
                    AGENT: {"components": components},
                    USER: {"components": user_components(components, env.user_reward)},
                },
                end_reason=str(batch.end_reason[index]),
                turns=int(batch.exchange[index] * 2 - (batch.end_reason[index] == "persuader_closed")),
                samples={side: [_sample(trace[side][index])] for side in SIDES if trace[side][index]},
                generated_tokens=sum(len(trace[side][index]) for side in SIDES),
                tool_errors=dict.fromkeys(SIDES, 0),
            )
        )
    return episodes


def _sample(turns: list[tuple[np.ndarray, np.ndarray, int, float]]) -> ActSample:
    sample = ActSample(
        ids=[0, *(act for _, _, act, _ in turns)],
        mask=[0] + [1] * len(turns),
        logprobs=[0.0, *(logprob for _, _, _, logprob in turns)],
        prompt_length=1,
        features=np.array([features for features, _, _, _ in turns]),
        allowed=np.array([allowed for _, allowed, _, _ in turns]),
    )
    sample.check()
    return sample
