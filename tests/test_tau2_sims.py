import pytest

pytest.importorskip("tau2")

from scope_envs.core.chat import Message
from scope_envs.tau2 import Tau2Env, load_domain
from scope_envs.tau2.prompts import user_system_prompt
from scope_envs.tau2.scripted import (
    ANYTHING_ELSE,
    GoldActionsAgent,
    ScriptedTau2User,
    find_task,
    first_person,
    opening_request,
    parse_scenario,
)


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_the_user_reads_its_scenario_back_exactly(domain_name):
    for task in load_domain(domain_name).tasks.values():
        instructions = task.user_scenario.instructions
        parsed = parse_scenario(user_system_prompt(task.user_scenario))
        assert parsed["reason_for_call"] == instructions.reason_for_call
        assert parsed.get("known_info") == instructions.known_info
        assert parsed.get("unknown_info") == instructions.unknown_info
        assert parsed["task_instructions"] == instructions.task_instructions
        assert parsed["domain"] == domain_name


def test_first_person():
    assert first_person("You are Yusuf Rossi in zip code 19122.") == "I am Yusuf Rossi in zip code 19122."
    assert first_person("Your user id is raj_sanchez_7340.") == "My user id is raj_sanchez_7340."
    assert first_person("You name is Yusuf Li.") == "My name is Yusuf Li."
    assert first_person("an agent told you that you can cancel") == "an agent told me that I can cancel"


@pytest.mark.parametrize("domain_name", ["retail", "airline"])
def test_the_gold_agent_recognises_every_task_from_the_users_opening(domain_name):
    domain = load_domain(domain_name)
    for task in domain.tasks.values():
        parsed = parse_scenario(user_system_prompt(task.user_scenario))
        found = find_task(domain_name, opening_request(parsed))
        assert [(a.name, a.arguments) for a in found.evaluation_criteria.actions] == [
            (a.name, a.arguments) for a in task.evaluation_criteria.actions
        ]
        assert found.evaluation_criteria.communicate_info == task.evaluation_criteria.communicate_info


def test_scripted_user_turns():
    user = ScriptedTau2User()
    env = Tau2Env(domain="retail")
    _, infos = env.reset(options={"task_id": "1"})
    view = infos["user"]["messages"]
    opening = user.respond(view).text
    assert opening.startswith("I received my order #W2378156 and wish to exchange") and "I am Yusuf Rossi" in opening
    assert user.respond(view, seed=3).text == opening  # deterministic
    convo = [*view, {"role": "assistant", "content": opening}]

    def answer(agent_text):
        return user.respond([*convo, {"role": "user", "content": agent_text}]).text

    assert answer("Could you confirm (yes/no) that I should proceed?") == "Yes, please go ahead."
    assert answer("What is your email or your name and zip code?") == "I am Yusuf Rossi in zip code 19122."
    assert answer("I will transfer you to a human agent.") == "###TRANSFER###"
    assert answer(f"Done. {ANYTHING_ELSE}").endswith("###STOP###")
    long = [*view] + [
        m for _ in range(10) for m in ({"role": "assistant", "content": "ok"}, {"role": "user", "content": "hm"})
    ]
    assert user.respond(long).text.endswith("###STOP###")


def test_gold_agent_turns():
    agent = GoldActionsAgent()
    env = Tau2Env(domain="retail")
    env.reset(options={"task_id": "1"})
    _, _, _, _, infos = env.step({"user": "Can you help?"})
    assert "what you need help with" in agent.respond(infos["agent"]["messages"], infos["agent"]["tools"]).text
    env.reset(options={"task_id": "1"})
    opening = ScriptedTau2User().respond(env.view("user")).text
    _, _, _, _, infos = env.step({"user": opening})
    reply = agent.respond(infos["agent"]["messages"], infos["agent"]["tools"])
    first = env.task.evaluation_criteria.actions[0]
    assert [(c.name, c.args) for c in reply.tool_calls] == [(first.name, first.arguments)]
    assert "cannot help" in agent.respond([Message("system", "x"), Message("user", opening)], []).text
