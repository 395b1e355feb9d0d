import copy
import json
import subprocess
import sys

import pytest

pytest.importorskip("tau2")

from scope_envs.core.chat import Message, ToolCall, tool_name
from scope_envs.tau2 import Tau2AirlineEnv, Tau2Env, Tau2RetailEnv, parallel_env
from scope_envs.tau2.prompts import first_agent_message, user_guidelines
from scope_envs.testing import check_env


def call(name, **arguments):
    return json.dumps({"name": name, "arguments": arguments})


@pytest.mark.parametrize("env_cls", [Tau2RetailEnv, Tau2AirlineEnv])
def test_conformance(env_cls):
    check_env(lambda: env_cls())


def test_prompts_tools_and_greeting_are_tau2s():
    env = Tau2RetailEnv()
    _, infos = env.reset(options={"task_id": "1"})
    agent, user = infos["agent"]["messages"], infos["user"]["messages"]
    assert agent[0]["content"].startswith("<instructions>\nYou are a customer service agent")
    assert env.domain.policy in agent[0]["content"]
    assert user_guidelines() in user[0]["content"]
    assert (
        str(env.task.user_scenario) in user[0]["content"]
        and "You are Yusuf Rossi in zip code 19122." in user[0]["content"]
    )
    assert env.task.user_scenario.instructions.reason_for_call not in agent[0]["content"]
    assert (
        agent[1]
        == {"role": "assistant", "content": first_agent_message()}
        == {
            "role": "assistant",
            "content": "Hi! How can I help you today?",
        }
    )
    assert user[1] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert infos["agent"]["to_speak"] == "user" and infos["user"]["tools"] == []
    reference = env.domain.environment(env.domain.fork_db())
    assert [tool_name(t) for t in infos["agent"]["tools"]] == [t.name for t in reference.get_tools()]
    assert infos["agent"]["scenario"] == {"domain": "retail", "task_id": "1", "split": "train", "task_set": "tau2"}


def test_prompts_equal_those_tau2_builds(monkeypatch):
    """The texts read from tau2's source equal what tau2's own agent, user simulator and orchestrator use."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # tau2's LLM client, imported here, stays offline
    from tau2.agent.llm_agent import LLMAgent
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.user.user_simulator import UserSimulator

    env = Tau2AirlineEnv()
    _, infos = env.reset(options={"task_id": "3"})
    agent = LLMAgent(tools=[], domain_policy=env.domain.policy)
    user = UserSimulator(instructions=str(env.task.user_scenario))
    assert infos["agent"]["messages"][0]["content"] == agent.system_prompt
    assert infos["user"]["messages"][0]["content"] == user.system_prompt
    assert infos["agent"]["messages"][1]["content"] == DEFAULT_FIRST_AGENT_MESSAGE.content


def test_tools_run_on_the_episodes_own_database():
    env = Tau2RetailEnv()
    base_order = dict.get(env.domain.base_db.orders, "#W2378156")
    before = base_order.model_dump()
    env.reset(options={"task_id": "1"})
    env.step({"user": "I want to exchange items."})
    _, _, _, _, infos = env.step(
        {
            "agent": call(
                "exchange_delivered_order_items",
                order_id="#W2378156",
                item_ids=["4983901480"],
                new_item_ids=["7747408585"],
                payment_method_id="credit_card_9513926",
            )
        }
    )
    result = json.loads(infos["agent"]["messages"][-1]["content"])
    assert result["status"] == "exchange requested" and infos["agent"]["to_speak"] == "agent"
    assert env.db.orders["#W2378156"].status == "exchange requested"
    assert base_order.model_dump() == before  # the shared base is never written
    env.reset(options={"task_id": "1"})
    assert env.db.orders["#W2378156"].status == "delivered"  # a new episode starts from the base


def test_tool_errors_read_like_tau2s_and_count_against_the_budget():
    env = Tau2RetailEnv(max_errors=1)
    env.reset(options={"task_id": "1"})
    env.step({"user": "hello"})
    _, _, _, _, infos = env.step({"agent": call("get_order_details", order_id="#W0")})
    assert infos["agent"]["messages"][-1]["content"] == "Error: Order not found" and env.errors == 1
    _, rewards, terminated, truncated, infos = env.step({"agent": call("get_user_details", user_id="nobody")})
    assert truncated["agent"] and not terminated["agent"] and infos["agent"]["end_reason"] == "error_budget"
    assert rewards == {"agent": 0.0, "user": 0.0}
    assert "prematurely" in infos["agent"]["reward_info"]["note"]


def test_several_tool_calls_in_one_message_run_in_order():
    env = Tau2RetailEnv()
    env.reset(options={"task_id": "1"})
    env.step({"user": "hi"})
    calls = (
        ToolCall.create("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),
        ToolCall.create("get_user_details", {"user_id": "yusuf_rossi_9620"}),
    )
    _, _, _, _, infos = env.step({"agent": Message("assistant", None, tool_calls=calls)})
    tail = infos["agent"]["messages"][-3:]
    assert [m["role"] for m in tail] == ["assistant", "tool", "tool"]
    assert tail[1]["content"] == "yusuf_rossi_9620" and json.loads(tail[2]["content"])["user_id"] == "yusuf_rossi_9620"
    assert [c.name for c in env.executed_calls] == ["find_user_id_by_name_zip", "get_user_details"]


@pytest.mark.parametrize(
    ("side", "text", "reason"),
    [
        ("user", "Thanks! ###STOP###", "user_stop"),
        ("user", "###TRANSFER###", "user_transfer"),
        ("user", "###OUT-OF-SCOPE###", "user_out_of_scope"),
        ("agent", "Goodbye ###STOP###", "agent_stop"),
    ],
)
def test_stops_terminate(side, text, reason):
    env = Tau2RetailEnv()
    env.reset(options={"task_id": "57"})  # no actions, no information to communicate: any stop scores 1
    if side == "agent":
        env.step({"user": "hello"})
    _, rewards, terminated, truncated, infos = env.step({side: text})
    assert terminated[side] and not truncated[side] and infos[side]["end_reason"] == reason
    assert rewards == {"agent": 1.0, "user": 1.0}


def test_agent_transfer_ends_the_episode_unless_disabled():
    env = Tau2RetailEnv()
    env.reset(options={"task_id": "57"})
    env.step({"user": "I want a human"})
    _, _, terminated, _, infos = env.step({"agent": call("transfer_to_human_agents", summary="wants a human")})
    assert terminated["agent"] and infos["agent"]["end_reason"] == "agent_transfer"
    assert infos["agent"]["messages"][-1]["content"] == "Transfer successful"
    env = Tau2RetailEnv(end_on_transfer=False)
    env.reset(options={"task_id": "57"})
    env.step({"user": "I want a human"})
    env.step({"agent": call("transfer_to_human_agents", summary="wants a human")})
    assert env.end is None and env.to_speak == "agent"


def test_turn_limit_truncates_with_reward_zero():
    env = Tau2AirlineEnv(max_turns=4)
    env.reset(options={"task_id": "0"})
    env.step({"user": "hi"})
    env.step({"agent": "hello"})
    _, rewards, terminated, truncated, infos = env.step({"user": "still there?"})
    assert truncated["user"] and not terminated["user"] and infos["user"]["end_reason"] == "max_turns"
    assert rewards == {"agent": 0.0, "user": 0.0}


def test_user_reward_options():
    env = Tau2RetailEnv(user_reward="adversarial")
    env.reset(options={"task_id": "57"})
    _, rewards, _, _, infos = env.step({"user": "###STOP###"})
    assert rewards == {"agent": 1.0, "user": 0.0} and infos["user"]["reward_info"]["user_reward"] == "adversarial"
    with pytest.raises(ValueError, match="user_reward"):
        Tau2RetailEnv(user_reward="selfish")


def test_tasks_and_splits():
    retail, airline = Tau2RetailEnv(), Tau2AirlineEnv()
    assert (len(retail.task_ids("train")), len(retail.task_ids("test")), len(retail.task_ids("base"))) == (74, 40, 114)
    assert (len(airline.task_ids("train")), len(airline.task_ids("test")), len(airline.task_ids("base"))) == (
        30,
        20,
        50,
    )
    test_ids = set(retail.task_ids("test"))
    drawn = {retail.reset(seed=s, options={"split": "test"})[1]["agent"]["scenario"]["task_id"] for s in range(60)}
    assert drawn <= test_ids and len(drawn) > 10
    drawn = {retail.reset(seed=s)[1]["agent"]["scenario"]["task_id"] for s in range(60)}
    assert drawn <= set(retail.task_ids("train"))
    assert retail.reset(seed=3)[1] == retail.reset(seed=3)[1]
    _, infos = retail.reset(options={"task_id": retail.task_ids("test")[0]})
    assert infos["agent"]["scenario"]["split"] == "test"
    assert airline.reset(options={"task_id": 5})[1]["agent"]["scenario_id"] == "airline/5"
    with pytest.raises(ValueError, match="unknown tau2 retail task_id"):
        retail.reset(options={"task_id": "no-such-task"})
    with pytest.raises(ValueError, match="split must be one of"):
        retail.reset(options={"split": "dev"})
    with pytest.raises(ValueError, match="domain must be one of"):
        parallel_env(domain="telecom")


def test_deep_copy_shares_the_domain_and_copies_the_episode():
    env = Tau2RetailEnv()
    env.reset(options={"task_id": "1"})
    env.step({"user": "hi"})
    env.step({"agent": call("modify_user_address", user_id="yusuf_rossi_9620", **ADDRESS)})
    clone = copy.deepcopy(env)
    assert clone.domain is env.domain
    clone.db.users["yusuf_rossi_9620"].address.city = "Elsewhere"
    assert env.db.users["yusuf_rossi_9620"].address.city == "Testville"
    assert dict.get(env.domain.base_db.users, "yusuf_rossi_9620").address.city != "Testville"


ADDRESS = {
    "address1": "1 Main St",
    "address2": "",
    "city": "Testville",
    "state": "CA",
    "country": "USA",
    "zip": "00000",
}


def test_importing_scope_envs_does_not_need_tau2():
    code = (
        "import sys; sys.modules['tau2'] = None\n"
        "import scope_envs, scope_envs.tau2\n"
        "from scope_envs.tau2 import Tau2RetailEnv\n"
        "try:\n    Tau2RetailEnv()\nexcept ImportError as error:\n    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "scope-envs[tau2]"' in out


def test_domain_is_required_for_the_generic_class():
    with pytest.raises(ValueError, match="domain="):
        Tau2Env()


@pytest.mark.parametrize("name", ["Tau2Retail", "Tau2Airline"])
def test_both_views_are_registered(name):
    import gymnasium as gym

    agent_view = gym.make(f"scope_envs:scope/{name}-v0", simulator="scripted")
    _, info = agent_view.reset(seed=0)
    assert info["to_speak"] == "agent" and info["messages"][-1]["role"] == "user"
    user_view = gym.make(f"scope_envs:scope/{name}-User-v0", agent="scripted")
    _, info = user_view.reset(seed=0)
    assert info["to_speak"] == "user" and info["scenario"]["split"] == "train"
