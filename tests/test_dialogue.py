import json

import pytest
from helpdesk_env import STOP, HelpdeskEnv
from local_data import COOPERBENCH, require

from scope_envs import Message, ToolCall
from scope_envs.testing import BAD_ACTIONS, check_env


def test_helpdesk_passes_the_conformance_checker():
    check_env(HelpdeskEnv)


def test_reset_views_and_turn_taking(helpdesk):
    obs, infos = helpdesk.reset(seed=1, options={"task_id": "cancel-1001"})
    assert infos["agent"]["to_speak"] == infos["user"]["to_speak"] == "user"  # the agent's greeting is the opening
    assert infos["agent"]["messages"][-1] == {"role": "assistant", "content": "Hi! How can I help you today?"}
    assert infos["user"]["messages"][-1] == {"role": "user", "content": "Hi! How can I help you today?"}
    assert [t["function"]["name"] for t in infos["agent"]["tools"]] == ["find_order", "cancel_order"]
    assert infos["user"]["tools"] == []
    assert obs["user"].startswith("[system]\nYou are a customer. Your order id is O-1001")
    _, rewards, terminated, truncated, infos = helpdesk.step({"user": "Cancel O-1001 please", "agent": "ignored"})
    assert infos["user"]["event"] == "message" and infos["agent"]["to_speak"] == "agent"
    assert rewards == {"agent": 0.0, "user": 0.0} and not any(terminated.values()) and not any(truncated.values())


def test_tool_call_keeps_the_turn_and_is_answered_privately(helpdesk):
    helpdesk.reset(seed=1, options={"task_id": "cancel-1001"})
    helpdesk.step({"user": "Cancel O-1001"})
    _, _, _, _, infos = helpdesk.step(
        {"agent": '{"name": "cancel_order", "arguments": {"order_id": "O-1001", "reason": "late"}}'}
    )
    assert infos["agent"]["to_speak"] == "agent"
    call, result = infos["agent"]["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == "cancel_order"
    assert result == {
        "role": "tool",
        "content": '{"item": "kettle", "status": "cancelled"}',
        "tool_call_id": call["tool_calls"][0]["id"],
        "name": "cancel_order",
    }
    assert all("tool_calls" not in m for m in infos["user"]["messages"])
    assert helpdesk.orders["O-1001"]["status"] == "cancelled"


def test_several_calls_in_one_message_run_in_order(helpdesk):
    helpdesk.reset(seed=1, options={"task_id": "cancel-1001"})
    helpdesk.step({"user": "hi"})
    calls = (
        ToolCall.create("cancel_order", {"order_id": "O-1001", "reason": "late"}),
        ToolCall.create("find_order", {"order_id": "O-1001"}),
    )
    _, _, _, _, infos = helpdesk.step({"agent": Message("assistant", None, tool_calls=calls)})
    results = [m for m in infos["agent"]["messages"] if m["role"] == "tool"]
    assert [json.loads(r["content"])["status"] for r in results] == ["cancelled", "cancelled"]
    assert len({r["tool_call_id"] for r in results}) == 2


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ('{"name": "find_order", "arguments": {', "not valid JSON"),
        (
            '{"name": "delete_everything", "arguments": {}}',
            "unknown tool 'delete_everything'. Available tools: cancel_order, find_order.",
        ),
        ('{"name": "find_order", "arguments": {"order_id": 7}}', "7 is not of type 'string'"),
        ('{"name": "cancel_order", "arguments": {"order_id": "O-1001", "reason": "bored"}}', "'bored' is not one of"),
        ('{"name": "find_order", "arguments": {}}', "'order_id' is a required property"),
        ('{"name": "find_order", "arguments": {"order_id": "O-9"}}', "order O-9 not found"),
    ],
)
def test_bad_tool_calls_are_answered_with_tool_errors(helpdesk, action, expected):
    helpdesk.reset(seed=1, options={"task_id": "cancel-1001"})
    helpdesk.step({"user": "hi"})
    _, _, terminated, truncated, infos = helpdesk.step({"agent": action})
    reply = infos["agent"]["messages"][-1]
    assert reply["role"] == "tool" and reply["content"].startswith("Error: ") and expected in reply["content"]
    assert infos["agent"]["tool_results"][0]["error"] and infos["agent"]["errors"] == 1
    assert infos["agent"]["to_speak"] == "agent" and not terminated["agent"] and not truncated["agent"]


def test_a_tool_that_crashes_is_an_error_message_not_an_exception(helpdesk, monkeypatch):
    helpdesk.reset(seed=1)
    helpdesk.step({"user": "hi"})
    helpdesk.orders = None  # the tool implementation now raises AttributeError
    _, _, _, _, infos = helpdesk.step({"agent": '{"name": "find_order", "arguments": {"order_id": "O-1001"}}'})
    assert "tool 'find_order' failed: AttributeError" in infos["agent"]["messages"][-1]["content"]


@pytest.mark.parametrize("bad", BAD_ACTIONS, ids=lambda b: repr(b)[:30])
def test_bad_actions_never_raise(helpdesk, bad):
    helpdesk.reset(seed=3)
    helpdesk.step({"user": bad})
    if helpdesk.agents:
        helpdesk.step({helpdesk.to_speak: bad})


def test_invalid_action_is_explained_and_counted_but_not_recorded(helpdesk):
    _, infos = helpdesk.reset(seed=0)
    before = infos["user"]["messages"]
    _, _, _, _, infos = helpdesk.step({"user": 42})
    assert infos["user"]["event"] == "invalid_action" and "got int" in infos["user"]["error"]
    assert infos["user"]["messages"] == before and infos["user"]["errors"] == 1 and helpdesk.to_speak == "user"


def test_unencodable_text_is_repaired_with_a_warning(helpdesk):
    helpdesk.reset(seed=0)
    _, _, _, _, infos = helpdesk.step({"user": "caf\udce9"})
    assert infos["agent"]["messages"][-1]["content"] == "caf\ufffd"
    assert infos["user"]["warnings"]


def test_user_stop_terminates_with_reward_breakdown(helpdesk):
    helpdesk.reset(seed=0, options={"task_id": "status-1002"})
    _, rewards, terminated, truncated, infos = helpdesk.step({"user": f"bye {STOP}"})
    assert terminated == {"agent": True, "user": True} and truncated == {"agent": False, "user": False}
    assert infos["agent"]["end_reason"] == "user_stop" and infos["agent"]["to_speak"] is None
    assert infos["agent"]["reward_info"] == {"reward": 1.0, "components": {"db": 1.0, "user_stop": 1.0}}
    assert rewards == {"agent": 1.0, "user": 1.0} and helpdesk.agents == []
    with pytest.raises(RuntimeError, match="call reset"):
        helpdesk.step({"agent": "more"})


def test_turn_limit_is_a_truncation():
    env = HelpdeskEnv(max_turns=3)
    env.reset(seed=0, options={"task_id": "status-1002"})
    env.step({"user": "a"})
    _, rewards, terminated, truncated, infos = env.step({"agent": "b"})
    assert truncated["agent"] and not terminated["agent"] and infos["agent"]["end_reason"] == "max_turns"
    assert infos["agent"]["reward_info"]["components"]["user_stop"] == 0.0 and rewards["agent"] == 0.0


def test_error_budget_is_a_truncation():
    env = HelpdeskEnv(max_errors=2)
    env.reset(seed=0)
    env.step({"user": "hi"})
    for expected_done in (False, False, True):
        _, _, _, truncated, infos = env.step({"agent": '{"name": "nope"}'})
        assert truncated["agent"] is expected_done
    assert infos["agent"]["end_reason"] == "error_budget"


def test_tool_calls_per_turn_are_bounded():
    env = HelpdeskEnv(max_tool_calls_per_turn=3)
    env.reset(seed=0)
    env.step({"user": "hi"})
    results = [env.step({"agent": '{"name": "find_order", "arguments": {"order_id": "O-1001"}}'}) for _ in range(4)]
    assert [r[3]["agent"] for r in results] == [False, False, False, True]
    assert results[-1][4]["agent"]["end_reason"] == "tool_call_budget"


def test_one_megabyte_message_hits_the_context_budget(helpdesk):
    helpdesk.reset(seed=0)
    _, _, terminated, truncated, infos = helpdesk.step({"user": "x" * 1_000_000})
    assert truncated["user"] and not terminated["user"] and infos["user"]["end_reason"] == "context_budget"


def test_context_budget_uses_the_given_token_counter():
    env = HelpdeskEnv(max_context_tokens=2, count_tokens=lambda messages: len(messages))
    env.reset(seed=0)  # system + greeting: 2 messages per view, within budget
    _, _, _, truncated, infos = env.step({"user": "one more"})
    assert truncated["user"] and infos["user"]["end_reason"] == "context_budget"


def test_abort_is_a_truncation_with_rewards(helpdesk):
    helpdesk.reset(seed=0)
    _, rewards, terminated, truncated, infos = helpdesk.abort("policy_error", "the API kept failing")
    assert truncated == {"agent": True, "user": True} and not any(terminated.values())
    assert infos["user"]["end_reason"] == "policy_error" and infos["user"]["end_detail"] == "the API kept failing"
    assert rewards == {"agent": 0.0, "user": 0.0}


def test_reset_options_choose_the_scenario_and_seed_reproduces_it(helpdesk):
    assert helpdesk.reset(options={"task_id": "status-1004"})[1]["agent"]["scenario_id"] == "status-1004"
    test_ids = {helpdesk.reset(seed=s, options={"split": "test"})[1]["agent"]["scenario_id"] for s in range(20)}
    assert test_ids == {"status-1004", "cancel-1002"}
    first = [helpdesk.reset(seed=5)[1]["agent"]["scenario_id"]] + [
        helpdesk.reset()[1]["agent"]["scenario_id"] for _ in range(5)
    ]
    again = [helpdesk.reset(seed=5)[1]["agent"]["scenario_id"]] + [
        helpdesk.reset()[1]["agent"]["scenario_id"] for _ in range(5)
    ]
    assert first == again
    with pytest.warns(UserWarning, match="unknown options"):
        helpdesk.reset(options={"task": "typo"})


def test_missing_speaker_action_is_a_usage_error(helpdesk):
    helpdesk.reset(seed=0)
    with pytest.raises(ValueError, match="it is 'user'"):
        helpdesk.step({"agent": "not my turn"})


def test_render_shows_the_whole_transcript():
    env = HelpdeskEnv(render_mode="ansi")
    env.reset(seed=0, options={"task_id": "status-1002"})
    env.step({"user": "Where is O-1002?"})
    env.step({"agent": '{"name": "find_order", "arguments": {"order_id": "O-1002"}}'})
    text = env.render()
    assert text.splitlines() == [
        "agent: Hi! How can I help you today?",
        "user: Where is O-1002?",
        'agent: [tool call] find_order({"order_id": "O-1002"})',
        'agent <- tool find_order: {"item": "blender", "status": "shipped"}',
    ]
    with pytest.raises(ValueError, match="render_mode"):
        HelpdeskEnv(render_mode="rgb_array")


@pytest.mark.parametrize("name", ["P4G", "PersuasionActs", "PersuasionActs-v1", "Tau2Retail", "CooperBench"])
def test_pick_scenario_draws_what_reset_starts(name):
    """Rollouts choose each group's scenario with `pick_scenario` (no views, observations or infos):
    it must draw exactly what `reset` with the same seed and options starts, or a rollout would
    play other scenarios than the env's own reset."""
    from scope_envs.core.registration import find_env

    if name.startswith("Tau2"):
        pytest.importorskip("tau2")
    kwargs = {}
    if name == "CooperBench":
        kwargs["data_dir"] = require(COOPERBENCH)
    env = find_env(name).make(**kwargs)
    for seed in range(6):
        for split in ("train", "test"):
            picked = env.pick_scenario(seed, {"split": split}).scenario_id
            env.reset(seed=seed, options={"split": split})
            assert picked == env.scenario.scenario_id, (seed, split)
    with pytest.raises(ValueError, match="no-such-task"):
        env.pick_scenario(0, {"task_id": "no-such-task"})
    env.close()
