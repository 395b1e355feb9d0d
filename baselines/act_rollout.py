"""Rollouts for vectorized act-level envs: every episode of a step in one `ActsBatch`.

The trainer's `collect` hands over here when the env is vectorized. Scenarios are chosen exactly
as for text envs (the env's own `reset` with the group's seed); then, turn by turn, each player
acts for all live episodes it plays at once. Turns of `ActPolicy` players are kept as samples,
with the features and allowed acts they were chosen from, for the update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from baselines.act_policy import ActPolicy, ActSample
from baselines.episodes import Episode, derive_seed
from scope_envs.core.dialogue import AGENT, SIDES, USER, user_reward_from
from scope_envs.core.failpoints import failpoint
from scope_envs.persuasion_acts.engine import ActsBatch


def collect_acts(
    trainer: Any, step: int, *, group_size: int, split: str, players: list[dict[str, Any]], salt: int = 0
) -> list[Episode]:
    env, config = trainer.probe, trainer.config
    scenarios, group_of = [], []
    for group in range(len(players)):
        group_seed = derive_seed(config.seed, step, group, salt)
        scenario = env.reset(seed=group_seed, options={"split": split})[1][AGENT]["scenario_id"]
        scenarios.extend([scenario] * group_size)
        group_of.extend([group] * group_size)
    group_of_array = np.array(group_of)
    batch = ActsBatch(np.array([env.persona(s) for s in scenarios]), env.exchanges)
    rng = np.random.default_rng([config.seed, step, salt, 0xAC7])
    trace: dict[str, list[list[tuple[np.ndarray, np.ndarray, int, float]]]] = {
        side: [[] for _ in scenarios] for side in SIDES
    }
    while batch.live.any():
        for side in SIDES:
            waiting = batch.awaiting_user if side == USER else batch.live & ~batch.awaiting_user
            pending = np.flatnonzero(waiting)
            by_player: dict[int, tuple[Any, list[int]]] = {}
            for group in np.unique(group_of_array[pending]):
                player = players[group][side]
                by_player.setdefault(id(player), (player, []))[1].append(group)
            for player, groups in by_player.values():
                if not hasattr(player, "act"):
                    raise TypeError(
                        f"{getattr(player, 'name', type(player).__name__)} cannot play an act-level env: it needs "
                        "a vectorized act(features, mask, rng), as simulator families and act-level policies have"
                    )
                if salt == 0:
                    failpoint("rollout", step + 1)  # while training episodes are half played
                index = pending[np.isin(group_of_array[pending], groups)]
                if side == AGENT:
                    features = batch.agent_features(index)
                    allowed = np.ones((len(index), env.action_space(AGENT).n), bool)
                else:
                    features, allowed = batch.user_features(index)
                acts, logprobs = player.act(features, allowed, rng)
                if isinstance(player, ActPolicy):
                    for row, episode in enumerate(index):
                        trace[side][episode].append((features[row], allowed[row], int(acts[row]), float(logprobs[row])))
                (batch.step_agent if side == AGENT else batch.step_user)(index, acts)
    rewards, success = batch.agent_reward(), batch.success()
    user_rewards = user_reward_from(rewards, env.user_reward)
    episodes = []
    for index, scenario in enumerate(scenarios):
        samples = {side: [_sample(trace[side][index])] for side in SIDES if trace[side][index]}
        episodes.append(
            Episode(
                group=group_of[index],
                scenario_id=scenario,
                rewards={AGENT: float(rewards[index]), USER: float(user_rewards[index])},
                success=bool(success[index]),
                end_reason=str(batch.end_reason[index]),
                turns=int(batch.exchange[index] * 2 - (batch.end_reason[index] == "persuader_closed")),
                samples=samples,
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
