"""This env's reward against tau2's own evaluator (`evaluate_simulation`, EvaluationType.ALL) on the same messages.

The default run checks one task per kind of trajectory in each domain; `pytest -m slow` checks every
kind of trajectory of every retail and airline task.
"""

import pytest

pytest.importorskip("tau2")

from scope_envs.tau2 import Tau2Env
from scope_envs.tau2.parity import parity_cases, play, reference_reward

KINDS = {
    "gold",
    "empty",
    "not_communicated",
    "agent_stop",
    "transfer",
    "truncated",
    "wrong_item",
    "wrong_argument",
    "missing_step",
    "wrong_order",
    "extra_modification",
}


def compare(env, task_id, case):
    ours, info = play(env, task_id, case)
    reference = reference_reward(env)
    breakdown = {key.value: value for key, value in (reference.reward_breakdown or {}).items()}
    return ours, reference.reward, info["components"], breakdown


def one_task_per_kind(env):
    """For each kind of trajectory, the first task (in a fixed, spread-out order) that yields it."""
    ids = env.task_ids("base")
    picked = {}
    for task_id in ids[1::5] + [i for i in ids if i not in ids[1::5]]:
        for case in parity_cases(env.domain, env.domain.task(task_id)):
            picked.setdefault(case.name, (task_id, case))
    return picked


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_rewards_match_tau2_on_every_kind_of_trajectory(domain_name):
    env = Tau2Env(domain=domain_name)
    picked = one_task_per_kind(env)
    assert set(picked) == KINDS
    mismatches = []
    for name, (task_id, case) in picked.items():
        ours, theirs, components, breakdown = compare(env, task_id, case)
        if ours != theirs or components != breakdown:
            mismatches.append((task_id, name, ours, theirs, components, breakdown))
    assert not mismatches


@pytest.mark.slow
@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_rewards_match_tau2_on_every_task(domain_name):
    env = Tau2Env(domain=domain_name)
    mismatches, gold = [], []
    for task_id in env.task_ids("base"):
        for case in parity_cases(env.domain, env.domain.task(task_id)):
            ours, theirs, components, breakdown = compare(env, task_id, case)
            if case.name == "gold":
                gold.append((ours, theirs))
            if ours != theirs or components != breakdown:
                mismatches.append((task_id, case.name, ours, theirs, components, breakdown))
    assert not mismatches
    assert gold == [(1.0, 1.0)] * len(env.task_ids("base"))
