"""Act-level testbed throughput: a batched rollout (ours) vs one episode at a time through the
PettingZoo env (the anchor), in agent turns; and the batched vector env that `gymnasium.make_vec`
builds vs Gymnasium's `SyncVectorEnv` of the one-at-a-time views, in env steps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from acts_throughput import play_batched, play_one_at_a_time

import scope_envs  # noqa: F401
from scope_envs.persuasion_acts.simulators import ActFamily

SIMULATORS = {"plain": ActFamily(0, 3.0), "vs5": ActFamily(0, 3.0, k=5)}


@pytest.mark.parametrize("simulator", sorted(SIMULATORS))
@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_acts_rollout(compare, side, simulator):
    family = SIMULATORS[simulator]
    if side == "ours":
        compare(f"acts-rollout-{simulator}", side, lambda: play_batched(4096, family))
    else:
        compare(f"acts-rollout-{simulator}", side, lambda: play_one_at_a_time(20, family))


def steps(vector: gym.vector.VectorEnv, count: int) -> int:
    vector.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(count):
        vector.step(rng.integers(vector.single_action_space.n, size=vector.num_envs))
    return count * vector.num_envs


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_gymnasium_vector_env(compare, side):
    mode, num_envs = ("vector_entry_point", 1024) if side == "ours" else ("sync", 8)
    vector = gym.make_vec("scope/PersuasionActs-v0", num_envs=num_envs, vectorization_mode=mode)
    compare("acts-make-vec", side, lambda: steps(vector, 20))
    vector.close()
