"""tau2 reward and reset: this env (ours) against tau2's own code (the anchor), on gold trajectories.

Reward: this env's `evaluate()` (gold end state cached) against tau2's `evaluate_simulation(...,
EvaluationType.ALL)` on the same finished episodes, whose rewards are checked to be identical.
Reset: this env's `reset(options={"task_id": ...})` (a copy-on-write fork of the shared database)
against tau2's `get_environment()`, which tau2 calls per episode. `benchmarks/tau2_speed.py` prints
more detail (the first, cold episode of a task, tau2's `EnvironmentEvaluator` alone).
"""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("tau2", reason="the anchor is tau2's own code: pip install -e '.[tau2]'")

from scope_envs.tau2 import Tau2Env, require_tau2
from scope_envs.tau2.parity import parity_cases, play, reference_reward

TASKS = 5


@pytest.fixture(scope="module", params=["retail", "airline"])
def domain(request):
    require_tau2()  # silences tau2's debug logging, for tau2's timings as for ours
    name = request.param
    env = Tau2Env(domain=name)
    ids = env.task_ids("base")
    sample = ids[:: max(1, len(ids) // TASKS)][:TASKS]
    episodes = []
    for task_id in sample:
        gold = next(case for case in parity_cases(env.domain, env.domain.task(task_id)) if case.name == "gold")
        episode = Tau2Env(domain=name)
        reward, _ = play(episode, task_id, gold)
        assert reference_reward(episode).reward == reward == episode.evaluate().reward, task_id
        episodes.append(episode)
    tau2_environment = importlib.import_module(f"tau2.domains.{name}.environment")
    return {"name": name, "env": env, "sample": sample, "episodes": episodes, "tau2": tau2_environment}


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_tau2_reward(compare, domain, side):
    def rewards() -> int:
        for episode in domain["episodes"]:
            episode.evaluate() if side == "ours" else reference_reward(episode)
        return len(domain["episodes"])

    compare(f"tau2-reward-{domain['name']}", side, rewards)


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_tau2_reset(compare, domain, side):
    def resets() -> int:
        for task_id in domain["sample"]:
            if side == "ours":
                domain["env"].reset(options={"task_id": task_id})
            else:
                domain["tau2"].get_environment()
        return len(domain["sample"])

    compare(f"tau2-reset-{domain['name']}", side, resets)
