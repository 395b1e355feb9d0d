"""Probe states: the persuadee's situations on which simulators' replies are compared.

`user_states(env, count)` plays the rule-based persuader against the env's own persuadee (the
population) on training personas, with the env's rules, and keeps the features and allowed replies
of every persuadee turn; `count` of them, drawn without replacement by a fixed seed, are the
states a fidelity check (`sims.reply_distance`) measures distances on. Every stage of the
conversation is represented as often as scripted conversations reach it: requests (where donation
decisions are allowed) come in the proportion a reasonable persuader makes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scope_envs.core.specs import make_policy
from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.simulators import ScriptedPersuader


def user_states(env: Any, count: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`(features, mask)` of `count` persuadee turns of scripted conversations on `env`'s training personas."""
    if count < 1:
        raise ValueError("count must be at least 1")
    env = getattr(env, "unwrapped", env)
    rng = np.random.default_rng([0x9B0BE, seed])
    personas = env.personas["train"]
    batch = ActsBatch(personas, env.exchanges, env.rules)
    persuader, persuadee = ScriptedPersuader(), make_policy("scripted", env=env, side="user")
    features, masks = [], []
    while batch.live.any():
        live = np.flatnonzero(batch.live)
        acts, _ = persuader.act(batch.agent_features(live), np.ones((len(live), 14), bool), rng)
        batch.step_agent(live, acts)
        waiting = np.flatnonzero(batch.awaiting_user)
        if not len(waiting):
            continue
        state, mask = batch.user_features(waiting)
        features.append(state)
        masks.append(mask)
        replies, _ = persuadee.act(state, mask, rng)
        batch.step_user(waiting, replies)
    if not features:
        raise ValueError("the scripted conversations produced no persuadee turn")
    features, masks = np.concatenate(features), np.concatenate(masks)
    chosen = np.sort(rng.choice(len(features), size=min(count, len(features)), replace=False))
    return features[chosen], masks[chosen]
