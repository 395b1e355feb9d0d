import ast
import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("tau2")

from scope_envs import run_episodes
from scope_envs.tau2 import Tau2Env, cow, gold_state, load_domain
from scope_envs.tau2.parity import parity_cases, play
from scope_envs.tau2.prompts import NL_JUDGE_SYSTEM_PROMPT, NL_JUDGE_USER_PROMPT
from scope_envs.tau2.reward import db_matches


def full_hash(db):
    """tau2's own database hash (`ToolKitBase.get_db_hash`) of any database object."""
    from tau2.utils import get_dict_hash

    return get_dict_hash(db.model_dump())


def test_fork_copies_on_keyed_access_and_serialises_like_a_deep_copy():
    domain = load_domain("retail")
    fork = domain.fork_db()
    assert fork.users is not domain.base_db.users and cow.touched(fork) == {
        "products": set(),
        "users": set(),
        "orders": set(),
    }
    user_id = next(iter(domain.base_db.users))
    fork.users[user_id].address.city = "Forked"
    fork.orders.pop(next(iter(domain.base_db.orders)))
    assert dict.get(domain.base_db.users, user_id).address.city != "Forked"
    deep = domain.base_db.model_copy(deep=True)
    deep.users[user_id].address.city = "Forked"
    deep.orders.pop(next(iter(domain.base_db.orders)))
    assert full_hash(fork) == full_hash(deep) != full_hash(domain.base_db)
    touched = cow.touched(fork)
    assert touched["users"] == {user_id} and len(touched["orders"]) == 1 and not touched["products"]
    clone = copy.deepcopy(fork)
    clone.users[user_id].address.city = "Cloned"
    assert fork.users[user_id].address.city == "Forked" and full_hash(clone) != full_hash(fork)


def test_reads_by_iteration_share_records_and_lookups_are_tracked():
    domain = load_domain("retail")
    env = domain.environment(domain.fork_db())
    assert env.use_tool("find_user_id_by_email", email="yusuf.rossi7301@example.com") == "yusuf_rossi_9620"
    assert not any(cow.touched(env.tools.db).values())  # a search reads the shared records
    env.use_tool("get_user_details", user_id="yusuf_rossi_9620")
    assert cow.touched(env.tools.db)["users"] == {"yusuf_rossi_9620"}


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_db_check_equals_tau2_hash_comparison(domain_name):
    """On every kind of trajectory of several tasks, the fast check agrees with comparing tau2's full hashes."""
    env = Tau2Env(domain=domain_name)
    domain = env.domain
    tasks = [domain.task(i) for i in env.task_ids("base")[:: len(env.task_ids("base")) // 4][:4]]
    base_hash = full_hash(domain.base_db)
    compared = 0
    for task in tasks:
        gold_db = domain.fork_db()
        gold_env = domain.environment(gold_db)
        for action in task.evaluation_criteria.actions or []:
            try:
                gold_env.make_tool_call(action.name, requestor=action.requestor, **copy.deepcopy(action.arguments))
            except Exception:
                pass
        gold_hash = full_hash(gold_db)
        for case in parity_cases(domain, task):
            if case.ending in {"empty", "truncated"}:
                continue
            play(env, task.id, case)
            assert db_matches(domain, gold_state(domain, task), env.db) == (full_hash(env.db) == gold_hash), case.name
            compared += 1
    assert compared >= 12
    assert full_hash(domain.base_db) == base_hash  # no episode wrote to the shared base


def test_gold_state_is_computed_once():
    domain = load_domain("retail")
    task = domain.task("1")
    first = gold_state(domain, task)
    assert gold_state(domain, task) is first
    assert ("orders", "#W2378156") in first.records and not first.failed_actions


def test_scripted_user_and_gold_agent_reach_reward_one_on_every_task():
    reached = {}
    for domain_name in ("retail", "airline"):
        ids = Tau2Env(domain=domain_name).task_ids("base")
        envs = [Tau2Env(domain=domain_name) for _ in ids]
        results = run_episodes(
            envs, {"user": "scripted", "agent": "scripted"}, seeds=0, options=[{"task_id": i} for i in ids]
        )
        reached[domain_name] = sum(r.rewards["agent"] == 1.0 for r in results)
        assert all(r.terminated and r.end_reason in {"user_stop", "agent_transfer"} for r in results)
    assert reached == {"retail": 114, "airline": 50}


def test_components_and_details_are_reported():
    env = Tau2Env(domain="retail")
    case = next(c for c in parity_cases(env.domain, env.domain.task("2")) if c.name == "not_communicated")
    reward, info = play(env, "2", case)
    assert reward == 0.0 and info["components"] == {"DB": 1.0, "COMMUNICATE": 0.0}
    assert info["reward_basis"] == ["DB", "COMMUNICATE"] and info["db_match"] is True
    assert info["communicate_checks"] == [
        {"info": i, "met": False} for i in env.task.evaluation_criteria.communicate_info
    ]


class RecordingJudge:
    """A deterministic stand-in for an LLM judge: answers every assertion with a fixed verdict."""

    def __init__(self, verdict):
        self.verdict, self.seen = verdict, []

    def respond(self, messages, tools=None, *, seed=None):
        self.seen.append(messages)
        assertions = ast.literal_eval(messages[1]["content"].split("expectedOutcomes:")[1].strip())
        results = [{"expectedOutcome": a, "reasoning": "fixed", "metExpectation": self.verdict} for a in assertions]
        return json.dumps({"results": results})


def test_nl_assertions_are_reported_without_a_judge_and_judged_with_one():
    env = Tau2Env(domain="airline")
    env.reset(options={"task_id": "1"})
    _, rewards, _, _, infos = env.step({"user": "###STOP###"})
    nl = infos["agent"]["reward_info"]["nl_assertions"]
    assert nl == {
        "evaluated": False,
        "reason": "no judge supplied (nl_judge=)",
        "assertions": ["Agent should not approve the cancellation."],
    }
    judge = RecordingJudge(verdict=False)
    env = Tau2Env(domain="airline", nl_judge=judge)
    env.reset(options={"task_id": "1"})
    _, judged, _, _, infos = env.step({"user": "###STOP###"})
    nl = infos["agent"]["reward_info"]["nl_assertions"]
    assert nl["evaluated"] and nl["checks"][0]["met"] is False and nl["in_reward_basis"] is False
    assert judged == rewards  # not in these tasks' reward basis: reported, not scored
    system, user = judge.seen[0]
    assert system["content"] == NL_JUDGE_SYSTEM_PROMPT
    assert "assistant: Hi! How can I help you today?\nuser: ###STOP###" in user["content"]


def test_nl_judge_prompt_is_tau2s_verbatim():
    import importlib.util

    source = Path(importlib.util.find_spec("tau2.evaluator.evaluator_nl_assertions").origin).read_text()
    assert f'system_prompt = """{NL_JUDGE_SYSTEM_PROMPT}"""' in source
    assert f'user_prompt = f"""{NL_JUDGE_USER_PROMPT}"""' in source
