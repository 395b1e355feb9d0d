"""tau2's NL judge failing is never a score of 0: where its verdict is scored, an API error or an
unusable verdict fails the episode outside its conversation (`policy_error`, never trained on);
where it is only reported, the report says why it is missing; a rejected key stops the run. The
judge is an OpenAI-compatible client talking to a real HTTP server on loopback."""

import pytest

pytest.importorskip("tau2")

from llm_server import LLMServer

from scope_envs import run_episodes
from scope_envs.core.policy import FatalPolicyError
from scope_envs.tau2 import Tau2Env
from scope_envs.tau2.reward import judged_in_reward
from sims import make_simulator
from sims.retry import RetryPolicy


@pytest.fixture
def server():
    with LLMServer(lambda protocol, body: {"text": "I cannot judge that."}) as server:
        yield server


def judge(server):
    return make_simulator(
        "openai:judge", base_url=server.url + "/v1", api_key="loopback", retry=RetryPolicy(2, initial_delay=0.01)
    )


def judged_env(server):
    """A tau3 retail task whose reward scores NL assertions."""
    env = Tau2Env(domain="retail", task_set="tau3", nl_judge=judge(server))
    task_id = next(i for i in env.task_ids("base") if judged_in_reward(env.domain.task(i)))
    return env, task_id


@pytest.mark.parametrize("fault", ["500", "malformed", None])
def test_a_failing_judge_fails_the_episode_outside_its_conversation(server, fault, tau3_dir):
    """None: the server answers, but not with tau2's verdict (JSON with `results`)."""
    if fault is not None:
        server.fail_always(fault)
    env, task_id = judged_env(server)
    env.reset(options={"task_id": task_id})
    _, rewards, terminated, truncated, infos = env.step({"user": "###STOP###"})
    assert server.requests, "the judge was asked"
    assert (terminated["agent"], truncated["agent"]) == (False, True)
    assert infos["agent"]["end_reason"] == "policy_error" and rewards == {"agent": 0.0, "user": 0.0}
    assert infos["agent"]["end_detail"].startswith("tau2's NL judge")
    assert infos["agent"]["reward_info"]["ended_by"] == "user_stop"
    results = run_episodes([env], {"agent": "scripted", "user": "scripted"}, options={"task_id": task_id})
    assert results[0].end_reason == "policy_error"


def test_a_judge_only_reported_says_why_its_verdict_is_missing(server):
    """tau2's airline task 1 has an NL assertion outside its reward basis: judged, never scored."""
    server.fail_always("500")
    unjudged = Tau2Env(domain="airline")
    unjudged.reset(options={"task_id": "1"})
    env = Tau2Env(domain="airline", nl_judge=judge(server))
    env.reset(options={"task_id": "1"})
    _, rewards, terminated, _, infos = env.step({"user": "###STOP###"})
    assert rewards == unjudged.step({"user": "###STOP###"})[1]  # the reward never depended on the judge
    assert terminated["agent"] and infos["agent"]["end_reason"] == "user_stop"
    nl = infos["agent"]["reward_info"]["nl_assertions"]
    assert not nl["evaluated"] and "HTTP 500" in nl["reason"] and not nl["in_reward_basis"]
    assert server.requests


@pytest.mark.parametrize("task_set", ["tau2", "tau3"])
def test_a_judge_whose_key_is_rejected_stops_at_once(server, task_set, request):
    server.fail_always("401")
    if task_set == "tau3":
        request.getfixturevalue("tau3_dir")
        env, task_id = judged_env(server)
    else:
        env, task_id = Tau2Env(domain="airline", nl_judge=judge(server)), "1"
    env.reset(options={"task_id": task_id})
    with pytest.raises(FatalPolicyError, match="HTTP 401"):
        env.step({"user": "###STOP###"})
