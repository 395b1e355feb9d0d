"""The act-level persuasion testbed: conformance, dynamics, simulator families, calibration."""

import json

import gymnasium as gym
import numpy as np
import pytest

import scope_envs  # noqa: F401  (registers the environments)
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.persuasion_acts import ActsBatch, PersuasionActsEnv, parallel_env
from scope_envs.persuasion_acts.acts import (
    AGREE,
    ASK_AMOUNT,
    CLOSING,
    FIRST_AMOUNT,
    PERSUADEE_ACTS,
    PERSUADER_ACTS,
    POSITIVE,
    PROPOSITION,
    parse_act,
)
from scope_envs.persuasion_acts.model import REFERENCE_PATH, load_reference
from scope_envs.persuasion_acts.simulators import ActFamily
from scope_envs.testing import check_env
from sims import make_simulator


def test_check_env_passes():
    check_env(parallel_env, episodes=6)


def test_gymnasium_views_take_discrete_actions_and_text():
    env = gym.make("scope/PersuasionActs-v0", info="full")
    observation, info = env.reset(seed=3)
    assert env.action_space == gym.spaces.Discrete(len(PERSUADER_ACTS))
    assert observation.dtype == np.float32 and all(info["action_mask"])  # obs="features": a Box by default
    _, _, _, _, info = env.step(PROPOSITION)
    assert "[proposition-of-donation]" in info["messages"][-2]["content"]
    _, _, _, _, info = env.step("[ask-donation-amount] So, how much could you give?")
    assert "[ask-donation-amount]" in info["messages"][-2]["content"]
    _, _reward, terminated, truncated, info = env.step(CLOSING)
    assert terminated and not truncated and info["end_reason"] == "persuader_closed"
    user_view = gym.make("scope/PersuasionActs-User-v0")
    observation, info = user_view.reset(seed=0)
    assert user_view.action_space == gym.spaces.Discrete(len(PERSUADEE_ACTS))
    assert observation.shape == user_view.unwrapped.dialogue.observation_space(USER).shape


def test_decisions_answer_only_requests_and_bad_actions_are_explained():
    env = PersuasionActsEnv(info="full")
    env.reset(seed=0)
    env.step({AGENT: 2})  # an emotion appeal
    assert not env.allowed(USER)[AGREE] and env.allowed(USER)[POSITIVE]
    *_, infos = env.step({USER: AGREE})
    assert infos[USER]["event"] == "invalid_action" and "answer a proposition" in infos[USER]["error"]
    *_, infos = env.step({USER: "I feel like dancing"})
    assert infos[USER]["event"] == "invalid_action" and "not a user act" in infos[USER]["error"]
    env.step({USER: POSITIVE})
    env.step({AGENT: ASK_AMOUNT})
    assert env.allowed(USER)[FIRST_AMOUNT + 2]
    _, rewards, terminated, _, infos = env.step({USER: "[provide-amount-1.00] I'll give a dollar."})
    assert terminated[AGENT] and rewards[AGENT] == 0.5 and rewards[USER] == 0.5
    assert infos[AGENT]["reward_info"]["components"] == {"donation": 1.0, "success": 1.0}
    assert infos[AGENT]["end_reason"] == "donation"


def test_the_env_is_a_batch_of_one():
    """The same acts give the same features and reward through the env and through `ActsBatch`."""
    env = PersuasionActsEnv(exchanges=4, obs="both")
    observations, _ = env.reset(options={"task_id": "test-00007"})
    batch = ActsBatch(env.persona("test-00007")[None], exchanges=4)
    script = [(0, 3), (1, 0), (PROPOSITION, 1), (ASK_AMOUNT, 3)]
    for agent_act, user_act in script:
        np.testing.assert_allclose(observations[AGENT]["features"], batch.agent_features()[0], rtol=1e-6)
        batch.step_agent(np.array([0]), np.array([agent_act]))
        observations, *_ = env.step({AGENT: agent_act})
        np.testing.assert_allclose(observations[USER]["features"], batch.user_features()[0][0], rtol=1e-6)
        batch.step_user(np.array([0]), np.array([user_act]))
        observations, rewards, terminated, truncated, _infos = env.step({USER: user_act})
    assert truncated[AGENT] and not terminated[AGENT] and not batch.terminated[0]
    assert rewards[AGENT] == batch.agent_reward()[0] == 0.0


def test_text_acts_parse_back():
    for acts in (PERSUADER_ACTS, PERSUADEE_ACTS):
        for index, name in enumerate(acts):
            assert parse_act(acts, f"[{name}] whatever follows") == index
            assert parse_act(acts, f"I will do a {name} now") == index
            assert parse_act(acts, str(index)) == index
    assert parse_act(PERSUADER_ACTS, "nothing here") is None


def sample_frequencies(simulator, features, mask, n=60_000):
    rng = np.random.default_rng(0)
    replies, logprobs = simulator.act(np.repeat(features, n, 0), np.repeat(mask, n, 0), rng)
    return np.bincount(replies, minlength=mask.shape[1]) / n, replies, logprobs


def test_sharpening_and_verbalized_sampling_follow_the_model():
    batch = ActsBatch(load_reference().personas("train", 1))
    batch.step_agent(np.array([0]), np.array([ASK_AMOUNT]))
    features, mask = batch.user_features()
    reference = np.exp(ActFamily(0).log_reference(features, mask))[0]
    sharp = ActFamily(0, gamma=3.0)
    target = reference[mask[0]] ** 3 / (reference[mask[0]] ** 3).sum()
    np.testing.assert_allclose(sharp.distribution(features, mask)[0][mask[0]], target, atol=1e-9)
    entropy = lambda p: -(p[p > 0] * np.log(p[p > 0])).sum()  # noqa: E731
    assert entropy(target) < entropy(reference[mask[0]])
    plain, replies, logprobs = sample_frequencies(sharp, features, mask)
    np.testing.assert_allclose(plain, sharp.distribution(features, mask)[0], atol=0.01)
    np.testing.assert_allclose(logprobs, np.log(sharp.distribution(features, mask)[0][replies]))
    everything = sample_frequencies(sharp.verbalized(len(PERSUADEE_ACTS), draw="prob"), features, mask)[0]
    np.testing.assert_allclose(everything, reference, atol=0.01)  # all candidates listed: p_ref exactly
    one = sample_frequencies(sharp.verbalized(1), features, mask)[0]
    np.testing.assert_allclose(one, plain, atol=0.01)  # one candidate: plain sampling
    few = sample_frequencies(sharp.verbalized(3, draw="prob"), features, mask)[0]
    assert entropy(target) < entropy(few) < entropy(reference)


def test_families_differ_and_text_replies_match_the_batch():
    assert not np.allclose(ActFamily(0).weights, ActFamily(1).weights)
    np.testing.assert_array_equal(ActFamily(5).weights, ActFamily(5).weights)
    simulator = make_simulator("family:2@2.5/vs4")
    assert (simulator.family, simulator.gamma, simulator.k) == (2, 2.5, 4)
    with pytest.raises(ValueError, match="bad family spec"):
        make_simulator("family:two")
    env = PersuasionActsEnv()
    env.reset(seed=1)
    env.step({AGENT: PROPOSITION})
    features, mask = env.batch.user_features()
    text = simulator.respond(env.view(USER), seed=11).text
    expected = simulator.act(features, mask, np.random.default_rng(11))[0][0]
    assert parse_act(PERSUADEE_ACTS, text) == expected


def test_episodes_end_by_donation_closing_or_turn_limit():
    personas = load_reference().personas("train", 200)
    batch = ActsBatch(personas, exchanges=6)
    rng = np.random.default_rng(0)
    family = ActFamily(0)
    while batch.live.any():
        index = np.flatnonzero(batch.live)
        batch.step_agent(index, rng.integers(len(PERSUADER_ACTS), size=len(index)))
        waiting = np.flatnonzero(batch.awaiting_user)
        if len(waiting):
            batch.step_user(waiting, family.act(*batch.user_features(waiting), rng)[0])
    reasons = set(batch.end_reason)
    assert reasons == {"donation", "persuader_closed", "max_turns"}
    assert (batch.exchange <= 6).all()
    donated = batch.end_reason == "donation"
    assert (batch.donation[donated] > 0).all() and (batch.donation[~donated] == 0).all()
    np.testing.assert_allclose(batch.agent_reward(), batch.donation / 2)
    with pytest.raises(ValueError, match="over or waiting"):
        batch.step_agent(np.array([0]), np.array([0]))


def test_personas_are_fixed_per_split():
    reference = load_reference()
    np.testing.assert_array_equal(reference.personas("test", 5), reference.personas("test", 5))
    assert not np.allclose(reference.personas("test", 5), reference.personas("train", 5))
    env = PersuasionActsEnv()
    assert len(env.task_ids("test")) == 200
    with pytest.raises(ValueError, match="unknown PersuasionActs task_id"):
        env.reset(options={"task_id": "valid-00001"})


def test_calibration_converges_and_the_shipped_table_is_its_optimum(p4g_dir, tmp_path):
    """What calibration promises, not the digits of one library version: the fit reaches the one
    optimum of its strictly convex objective, and the shipped table is that optimum's behaviour.

    Tolerances: the shipped weights came from a fixed-step optimiser, 1.1e-4 nats per event above
    the optimum on today's libraries; 5e-4 is 40x below the sampling error of the mean
    log-likelihood itself (about 0.02 nats: its standard deviation over sqrt(2,495) events), so
    no conclusion drawn from the data could tell the two apart. Reply probabilities, the
    behaviour simulators sample from, agree within 0.05 on every calibration event."""
    from scope_envs.core.sampling import log_softmax
    from scope_envs.persuasion_acts.calibrate import main, objective, read_events, read_personas

    out = tmp_path / "reference.json"
    main(["--data", str(p4g_dir), "--out", str(out)])
    fresh, shipped = json.loads(out.read_text()), json.loads(REFERENCE_PATH.read_text())
    assert fresh["meta"]["events"] == shipped["meta"]["events"] > 2000
    assert fresh["meta"]["mean_log_likelihood"] > fresh["meta"]["uniform_log_likelihood"] + 0.2
    np.testing.assert_allclose(fresh["persona_correlation"], shipped["persona_correlation"], atol=2e-4)

    personas, _ = read_personas(p4g_dir / "full_info.csv")
    features, reply, mask = read_events(p4g_dir, personas)
    optimum, gradient = objective(np.array(fresh["weights"]), features, reply, mask)
    assert np.abs(gradient).max() < 1e-4  # converged (up to the 4-decimal rounding of the table)
    at_shipped, _ = objective(np.array(shipped["weights"]), features, reply, mask)
    assert 0 <= at_shipped - optimum < 5e-4
    behaviour = [np.exp(log_softmax(features @ np.array(t["weights"]).T, mask)) for t in (fresh, shipped)]
    assert np.abs(np.where(mask, behaviour[0] - behaviour[1], 0.0)).max() < 0.05


def test_calibration_fit_stops_at_its_tolerance():
    from scope_envs.persuasion_acts.calibrate import fit, objective

    rng = np.random.default_rng(0)
    features = rng.normal(size=(400, 6))
    mask = np.ones((400, 10), bool)
    mask[:, 7:] = rng.random((400, 3)) < 0.5
    reply = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
    weights, _ = fit(features, reply, mask, tolerance=1e-7)
    assert np.abs(objective(weights, features, reply, mask)[1]).max() < 1e-6


def test_scripted_persuader_acts_the_same_batched_and_as_text():
    from scope_envs.persuasion_acts.simulators import ScriptedPersuader

    persuader = ScriptedPersuader()
    batch = ActsBatch(np.zeros((1, 5)), exchanges=12)
    env = PersuasionActsEnv(exchanges=12)
    env.reset(seed=0)
    family = ActFamily(1)
    for exchange in range(12):
        if not env.agents:
            break
        rng = np.random.default_rng(exchange)
        batched = persuader.act(batch.agent_features(), np.ones((1, 14), bool), rng)[0][0]
        text = persuader.respond(env.view(AGENT), seed=exchange).text
        assert parse_act(PERSUADER_ACTS, text) == batched
        env.step({AGENT: int(batched)})
        batch.step_agent(np.array([0]), np.array([batched]))
        if env.agents:  # the family replays views longer than the default horizon
            reply = parse_act(PERSUADEE_ACTS, family.respond(env.view(USER), seed=exchange).text)
            env.step({USER: reply})
            batch.step_user(np.array([0]), np.array([reply]))
    with pytest.raises(ValueError, match="set exchanges, not max_turns"):
        PersuasionActsEnv(exchanges=2, max_turns=6)
