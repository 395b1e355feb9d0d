"""This env's reward against tau2's own evaluator (`evaluate_simulation`) on the same messages, on both
task sets (`tau2`: the installed package's tasks; `tau3`: tau2-bench's τ³ 1.0.0 tasks).

The default run checks one task per kind of trajectory in each domain and task set; `pytest -m slow`
checks every kind of trajectory of every retail and airline task of both task sets. Tasks whose
reward basis names NL assertions (most tau3 retail tasks) are judged on both sides by the same
judge, a real HTTP server on loopback that both tau2's litellm client and the env's `nl_judge`
call; the test checks that the two sent the same judge prompt.
"""

import ast
import json

import pytest

pytest.importorskip("tau2")

from llm_server import LLMServer
from local_data import TAU3, require

from scope_envs.tau2 import Tau2Env
from scope_envs.tau2.parity import parity_cases, play, reference_reward
from scope_envs.tau2.reward import judged_in_reward
from sims import make_simulator

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
MET_WHEN = "Your request is complete."  # what every case but the empty conversation has the agent say


def judge_responder(protocol, body):
    """tau2's judge format; an assertion is met when the conversation has the agent close the request."""
    prompt = body["messages"][-1]["content"]
    conversation, _, outcomes = prompt.partition("expectedOutcomes:")
    met = MET_WHEN in conversation
    results = [
        {"expectedOutcome": outcome, "reasoning": "fixed", "metExpectation": met}
        for outcome in ast.literal_eval(outcomes.strip())
    ]
    return {"text": json.dumps({"results": results})}


@pytest.fixture(scope="module")
def judge():
    with LLMServer(judge_responder) as server:
        yield server


def make_env(domain_name, task_set, server):
    if task_set == "tau3":
        require(TAU3)
    judge = make_simulator("openai:judge", base_url=server.url + "/v1", api_key="loopback")
    return Tau2Env(domain=domain_name, task_set=task_set, nl_judge=judge)


def compare(env, task_id, case, server):
    sent = len(server.requests)
    ours, info = play(env, task_id, case)
    reference = reference_reward(env, "openai/judge", api_base=server.url + "/v1", api_key="loopback")
    breakdown = {key.value: value for key, value in (reference.reward_breakdown or {}).items()}
    prompts = [request["body"]["messages"] for request in server.requests[sent:]]
    if len(prompts) == 2:  # a judged task: the env's judge, then tau2's, were sent the same prompt
        assert prompts[0] == prompts[1]
    else:
        assert prompts == [] or not judged_in_reward(env.task)
    return ours, reference.reward, info["components"], breakdown


def one_task_per_kind(env):
    """For each kind of trajectory, the first task (in a fixed, spread-out order) that yields it."""
    ids = env.task_ids("base")
    picked = {}
    for task_id in ids[1::5] + [i for i in ids if i not in ids[1::5]]:
        for case in parity_cases(env.domain, env.domain.task(task_id)):
            picked.setdefault(case.name, (task_id, case))
    return picked


@pytest.mark.parametrize("task_set", ["tau2", "tau3"])
@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_rewards_match_tau2_on_every_kind_of_trajectory(domain_name, task_set, judge):
    env = make_env(domain_name, task_set, judge)
    picked = one_task_per_kind(env)
    assert set(picked) == KINDS
    mismatches = []
    for name, (task_id, case) in picked.items():
        ours, theirs, components, breakdown = compare(env, task_id, case, judge)
        if ours != theirs or components != breakdown:
            mismatches.append((task_id, name, ours, theirs, components, breakdown))
    assert not mismatches


def test_judged_tasks_match_tau2_with_the_assertions_met_and_unmet(judge):
    """tau3 retail scores NL assertions: a judged task, gold (met) and empty (unmet), against tau2's judge."""
    env = make_env("retail", "tau3", judge)
    task_id = next(i for i in env.task_ids("base") if judged_in_reward(env.domain.task(i)))
    cases = {case.name: case for case in parity_cases(env.domain, env.domain.task(task_id))}
    gold = compare(env, task_id, cases["gold"], judge)
    assert gold[0] == gold[1] == 1.0 and gold[2] == gold[3] == {"DB": 1.0, "NL_ASSERTION": 1.0}
    sent = len(judge.requests)
    empty = compare(env, task_id, cases["empty"], judge)
    assert empty[0] == empty[1] == 0.0 and empty[2] == empty[3] == {"DB": 0.0, "NL_ASSERTION": 0.0}
    assert len(judge.requests) == sent + 2  # both sides judged it, and found the assertions unmet


@pytest.mark.slow
@pytest.mark.parametrize("task_set", ["tau2", "tau3"])
@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_rewards_match_tau2_on_every_task(domain_name, task_set, judge):
    env = make_env(domain_name, task_set, judge)
    mismatches, gold = [], []
    for task_id in env.task_ids("base"):
        for case in parity_cases(env.domain, env.domain.task(task_id)):
            ours, theirs, components, breakdown = compare(env, task_id, case, judge)
            if case.name == "gold":
                gold.append((ours, theirs))
            if ours != theirs or components != breakdown:
                mismatches.append((task_id, case.name, ours, theirs, components, breakdown))
    assert not mismatches
    assert gold == [(1.0, 1.0)] * len(env.task_ids("base"))
