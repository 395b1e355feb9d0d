"""Every id in Gymnasium's registry under `scope/`, made with its defaults, plays to the end.

The ids come from the registry, not from a list, so a new benchmark or version is checked the day
it is registered: `gymnasium.make(id)` with no arguments, `reset`, steps until the episode ends,
Gymnasium's `check_env`; `make_vec` for every id with a vector entry point; every benchmark's
`parallel_env()` through PettingZoo's `parallel_api_test`; and `scope play ID` as a person types it.
A benchmark whose data must be fetched first (CooperBench) skips, naming its setting, without it.
"""

import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

import scope_envs  # noqa: F401  (registers the envs)
from baselines.cli import main as scope
from scope_envs import find_env
from scope_envs.core.registration import REGISTERED

IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("scope/"))
NAMES = sorted(REGISTERED)
NEEDS_DATA = {"CooperBench": "SCOPE_COOPERBENCH_DATA"}  # benchmarks that cannot run before their data is fetched
MAX_STEPS = 500


def skip_without_data(name: str) -> None:
    setting = NEEDS_DATA.get(name)
    if setting and not os.environ.get(setting):
        pytest.skip(f"{name} needs its dataset: set {setting} (see docs/envs/{name.lower()}.md)")


def name_of(env_id: str) -> str:
    return find_env(env_id).name


def test_the_registry_holds_both_views_of_every_benchmark():
    assert len(IDS) == 2 * len(NAMES) >= 12
    assert {"scope/PersuasionActs-v1", "scope/PersuasionActs-User-v1"} <= set(IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_every_id_plays_to_the_end_with_its_defaults(env_id):
    skip_without_data(name_of(env_id))
    env = gym.make(env_id)
    env.action_space.seed(0)
    env.reset(seed=0)
    for _ in range(MAX_STEPS):
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    assert terminated or truncated, f"{env_id} did not end within {MAX_STEPS} steps"
    assert np.isfinite(reward)


@pytest.mark.parametrize("env_id", IDS)
def test_every_id_passes_check_env_with_its_defaults(env_id):
    skip_without_data(name_of(env_id))
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", [i for i in IDS if gym.spec(i).vector_entry_point])
def test_every_vector_entry_point_steps_with_its_defaults(env_id):
    envs = gym.make_vec(env_id, num_envs=3, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    for _ in range(40):  # several episodes: the batch autoresets
        _, rewards, *_ = envs.step(envs.action_space.sample())
        assert np.isfinite(rewards).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_parallel_env_passes_parallel_api_test_as_made(name):
    skip_without_data(name)
    parallel_api_test(find_env(name).make(), num_cycles=40)


@pytest.mark.parametrize("env_id", IDS)
def test_scope_play_plays_every_id_with_its_defaults(env_id, capsys):
    skip_without_data(name_of(env_id))
    assert scope(["play", env_id, "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("=== episode") == 2
    assert "after" in out and "rewards" in out
