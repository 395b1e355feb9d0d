"""Smoke runs of examples/: each outside RL library trains on the testbed with no wrapper of ours.

The RLlib run is slow (Ray start-up) and needs the `rllib` extra, which pins Ray's own Gymnasium:
    pip install -e ".[rllib]" && pytest -m slow tests/test_rl_libraries.py
"""

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sb3_ppo_trains_on_the_gymnasium_view_as_is():
    pytest.importorskip("stable_baselines3")
    reward = example("sb3_ppo").train(256, eval_episodes=10)
    assert 0.0 <= reward <= 1.0


def test_maskable_ppo_reads_the_views_masks_and_never_takes_a_forbidden_act():
    pytest.importorskip("sb3_contrib")
    reward, refused = example("sb3_maskable_ppo").train(256, eval_episodes=10)
    assert 0.0 <= reward <= 1.0 and refused == 0


def test_torchrl_ippo_trains_both_sides_through_its_pettingzoo_wrapper():
    pytest.importorskip("torchrl")
    rewards = example("torchrl_ippo").train(400, frames_per_batch=200, epochs=1)
    assert set(rewards) == {"agent", "user"}
    assert all(-1.0 <= value <= 1.0 for value in rewards.values())  # NaN (no finished episode) fails too


@pytest.mark.slow
def test_rllib_cotrains_both_sides_as_two_policies():
    pytest.importorskip("ray.rllib")
    returns = example("rllib_cotraining").train(1, train_batch=200)
    assert set(returns) == {"agent", "user"} and all(value is not None for value in returns.values())
