"""Hostile and mistaken input: a clear answer for every action, a clear error for every misuse of
the API, and no reward for breaking the rules."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpdesk_env import HelpdeskEnv
from hypothesis import given, settings
from hypothesis import strategies as st

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.spaces import UnicodeText
from scope_envs.p4g import P4GEnv
from scope_envs.p4g.donation import LOOKBEHIND, parse_donation
from scope_envs.persuasion_acts import PersuasionActsEnv


def acts_env() -> PersuasionActsEnv:
    env = PersuasionActsEnv(info="full")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("action", ["²", "٣", "9" * 5000, "-1", "14", 14, -1, 2**70, 3.0, None, b"\xff", [1]])
def test_every_action_is_an_act_or_a_clear_invalid_act(action):
    env = acts_env()
    _, _, _, _, infos = env.step({AGENT: action})
    assert infos[AGENT]["event"] == "invalid_action" and "not a agent act" in infos[AGENT]["error"]
    assert env.to_speak == AGENT and infos[AGENT]["errors"] == 1


def test_acts_as_numpy_integers_and_zero_dimensional_arrays():
    for action in (np.int64(3), np.array(3)):
        env = acts_env()
        assert env.step({AGENT: action})[4][AGENT]["event"] == "message"


def test_a_task_id_that_is_not_one_gets_a_clear_error():
    env = PersuasionActsEnv()
    for task_id in ("train-²²²²²", "train-" + "9" * 5000, "nope"):
        with pytest.raises(ValueError, match="unknown PersuasionActs task_id"):
            env.reset(options={"task_id": task_id})


def test_lone_surrogates_are_repaired_everywhere_they_enter():
    env = HelpdeskEnv()
    env.reset(seed=0)
    env.step({USER: "I want to cancel my order. \ud800"})
    call = '{"name": "find_order", "arguments": {"order_id": "O-1001\\ud83d"}, "id": "c\\udfff"}'
    observations, _, _, _, infos = env.step({AGENT: call})
    for side in (AGENT, USER):
        json.dumps(infos[side]).encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
        observations[side].encode("utf-8")
    assert "O-1001\ufffd" in json.dumps(infos[AGENT]["messages"], ensure_ascii=False)
    assert any("surrogates" in warning for warning in infos[AGENT]["warnings"])


def test_observations_stay_inside_their_space():
    env = HelpdeskEnv(max_context_tokens=None)
    env.observation_spaces = {side: UnicodeText(max_length=300) for side in (AGENT, USER)}
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step({USER: "x" * 5_000})
    for side in (AGENT, USER):
        assert env.observation_space(side).contains(observations[side])
    assert observations[AGENT].startswith("[... ") and observations[AGENT].endswith("x" * 100)


def test_the_donation_parser_reads_cues_only_a_few_words_back():
    assert parse_donation("I will donate 1") == 1.0
    assert parse_donation("I will donate " + "really " * 3 + "0.5") == 0.5
    assert parse_donation("I could donate " + "y" * 20 + " " + "y" * 20 + " half") == 1.0
    far = "I could donate " + ("y" * (LOOKBEHIND // 2) + " ") * 2 + "half"  # the cue is out of reach
    assert parse_donation(far) is None
    assert parse_donation("1 " * 8_000) is None and parse_donation("half " * 3_000) is None


def test_misuse_of_the_api_names_the_argument():
    env = P4GEnv(persona_source="synthetic")
    with pytest.raises(TypeError, match=r"options=\.\.\.\) takes a dict"):
        env.reset(options=5)
    with pytest.raises(TypeError, match=r"options\['task_id'\] must be a string"):
        env.reset(options={"task_id": 5.0})
    with pytest.raises(ValueError, match="unknown P4G task_id '5'"):
        env.reset(options={"task_id": 5})
    with pytest.raises(TypeError, match=r"options\['split'\] must be a string"):
        env.reset(options={"split": 3})
    env.reset(seed=0)
    with pytest.raises(TypeError, match="takes a dict mapping each side to its action"):
        env.step(None)
    with pytest.raises(ValueError, match=r"pass \{'agent': action\}"):
        env.step({"agnt": "hi"})
    helpdesk = HelpdeskEnv()
    with pytest.raises(ValueError, match=r"no scenario for options \{'task_id': 'nope'\}"):
        helpdesk.reset(options={"task_id": "nope"})


def test_a_side_that_exhausts_its_error_budget_gets_its_worst_reward():
    env = acts_env()  # the adversarial persuadee would earn 1 - r = 1 by never answering
    env.step({AGENT: 12})  # ask for an amount
    while env.agents:
        _, rewards, _, truncated, infos = env.step({USER: "not an act"})
    assert truncated[USER] and infos[USER]["end_reason"] == "error_budget" and "user made" in infos[USER]["end_detail"]
    assert rewards[USER] == 0.0 and infos[USER]["reward_info"]["reward_before_penalty"] == 1.0
    assert infos[USER]["reward_info"]["penalty"] == "exhausted its error budget"

    text = P4GEnv(persona_source="synthetic")  # the same in a text env, with unusable actions
    text.reset(seed=0)
    text.step({AGENT: "Would you donate?"})
    while text.agents:
        _, rewards, _, _, infos = text.step({USER: None})
    assert infos[USER]["end_reason"] == "error_budget" and rewards[USER] == 0.0


tau2 = pytest.importorskip("tau2")


def calculate(env, expression):
    env.reset(options={"task_id": "1"})
    env.step({USER: "Hi"})
    call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
    return env.step({AGENT: call})[4][AGENT]["messages"][-1]["content"]


@pytest.fixture(scope="module")
def retail():
    from scope_envs.tau2 import Tau2RetailEnv

    return Tau2RetailEnv()


@pytest.mark.parametrize("expression", ["9**9**9", "(10**10)**(10**10)", "2**100000", "1+" * 600 + "1"])
def test_calculate_refuses_what_it_cannot_compute_quickly(retail, expression):
    assert calculate(retail, expression).startswith("Error: ")


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 1e4, allow_nan=False).map(lambda x: f"{x:.2f}")),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "**"]), inner).map(" ".join),
            inner.map(lambda text: f"({text})"),
            inner.map(lambda text: f"-{text}"),
        ),
        max_leaves=8,
    )
)
def test_calculate_keeps_tau2_parity_on_ordinary_expressions(retail, expression):
    from tau2.domains.retail.tools import RetailTools

    from scope_envs.core.tools import ToolError
    from scope_envs.tau2.calculate import check_expression

    try:
        check_expression(expression)
    except ToolError:  # too large for tau2 to compute quickly (it could hang this test): refused
        assert calculate(retail, expression).startswith("Error: ")
        return
    try:
        expected = RetailTools.calculate(None, expression)
    except Exception:  # tau2 reports its own errors: then so does the env
        assert calculate(retail, expression).startswith("Error: ")
        return
    assert calculate(retail, expression) == expected
