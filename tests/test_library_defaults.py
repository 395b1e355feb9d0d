"""Every env, made with NO keyword arguments, passes the checks of the libraries that can take it.

The act-level testbed (arrays in, acts out) passes all five: PettingZoo's `parallel_api_test` and
`api_test`, Gymnasium's `check_env` on both views, TorchRL's `PettingZooWrapper` + `check_env_specs`
and RLlib's `ParallelPettingZooEnv` + its multi-agent env check. The dialogue envs (text in, text
out) pass PettingZoo's `parallel_api_test` and Gymnasium's `check_env`; the other three cannot
take a text observation at all (see docs/rl-libraries.md): PettingZoo's AEC `api_test` compares
each observation's `.dtype` with its space's, which a `str` has not; TorchRL maps spaces to tensor
specs and has none for `Text`; RLlib converts observations to float arrays.

Gymnasium's `check_env` and PettingZoo's `parallel_api_test` on every registered id, with its
defaults, are in tests/test_registry_defaults.py, which finds the ids in the registry.

RLlib needs the `rllib` extra (it pins its own Gymnasium), so its check skips without it:
    pip install -e ".[rllib]" && pytest tests/test_library_defaults.py
"""

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

import scope_envs  # noqa: F401  (registers the envs)
from scope_envs import find_env
from scope_envs.core import jsonable
from scope_envs.persuasion_acts import parallel_env

TEXT_ENVS = ["P4G", "Tau2Retail", "Tau2Airline"]


@pytest.fixture(autouse=True)
def _p4g_corpus(p4g_dir, monkeypatch):
    monkeypatch.setenv("SCOPE_P4G_DATA", str(p4g_dir))


def test_acts_pettingzoo_defaults_pass_pettingzoo_api_tests():
    parallel_api_test(parallel_env(), num_cycles=100)
    api_test(parallel_to_aec(parallel_env()), num_cycles=100)


def test_acts_action_mask_is_an_ndarray_in_the_infos():
    _, infos = parallel_env().reset(seed=0)
    for info in infos.values():
        assert isinstance(info["action_mask"], np.ndarray)
    env = find_env("PersuasionActs").make(info="full")
    _, infos = env.reset(seed=0)
    assert all(isinstance(info["action_mask"], np.ndarray) for info in infos.values())


def test_acts_one_set_of_defaults_for_gym_make_and_find_env():
    made = find_env("PersuasionActs").make()
    view = gym.make("scope/PersuasionActs-v0")
    assert view.observation_space == made.observation_space("agent") == parallel_env().observation_space("agent")
    assert isinstance(view.observation_space, gym.spaces.Box)


def test_acts_defaults_pass_torchrl():
    torchrl = pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    env = torchrl.envs.PettingZooWrapper(parallel_env())
    check_env_specs(env)
    rollout = env.rollout(20)
    assert rollout["agent", "action_mask"].dtype.is_floating_point is False


def test_acts_defaults_pass_rllib():
    pytest.importorskip("ray.rllib")
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    env = ParallelPettingZooEnv(parallel_env())
    check_multiagent_environments(env)
    observations, _ = env.reset(seed=0)
    assert all(np.asarray(obs).dtype == np.float32 for obs in observations.values())
    for _ in range(30):
        actions = {agent: env.action_space[agent].sample() for agent in env.get_agent_ids()}
        *_, dones, truncs, _ = env.step(actions)
        if dones["__all__"] or truncs["__all__"]:
            env.reset()


@pytest.mark.parametrize("name", ["PersuasionActs", *TEXT_ENVS])
def test_infos_become_json_for_a_logger(name):
    import json

    env = find_env(name).make()
    _, infos = env.reset(seed=0)
    assert json.loads(json.dumps(jsonable(infos))) == jsonable(infos)
    assert json.loads(json.dumps(jsonable(env.chat_infos)))["agent"]["messages"][0]["role"] == "system"


def test_jsonable_refuses_what_json_cannot_hold():
    with pytest.raises(TypeError, match="object is not JSON-serialisable"):
        jsonable({"x": object()})
