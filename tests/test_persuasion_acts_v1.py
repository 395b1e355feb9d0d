"""PersuasionActs-v1: refused requests end the episode, requests are bounded, the population and its
families are specs that round-trip, text and arrays agree, and the corpus fit's docs do not drift."""

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from local_data import P4G, require

from scope_envs.core.registration import find_env
from scope_envs.core.specs import make_policy
from scope_envs.persuasion_acts.acts import (
    ASK_AMOUNT,
    DISAGREE,
    NEUTRAL,
    PROPOSITION,
)
from scope_envs.persuasion_acts.engine import ActsBatch
from scope_envs.persuasion_acts.env import rules_of
from scope_envs.persuasion_acts.fit_population import corpus_report
from scope_envs.persuasion_acts.population import (
    POPULATION_PATH,
    USER_FEATURES_V1,
    load_population,
    sharpened,
    type_at,
)

ROOT = Path(__file__).resolve().parents[1]
ONE = np.array([0])


def v1_batch(exchanges=12):
    return ActsBatch(load_population().personas("test", 1), exchanges, rules_of(1))


def test_both_views_are_registered_as_version_one_and_v0_is_unchanged():
    info = find_env("scope/PersuasionActs-v1")
    assert (info.name, info.agent_id, info.user_id) == (
        "PersuasionActs-v1",
        "scope/PersuasionActs-v1",
        "scope/PersuasionActs-User-v1",
    )
    assert find_env("scope_envs:scope/PersuasionActs-User-v1") is info
    assert find_env("PersuasionActs").agent_id == "scope/PersuasionActs-v0"
    assert find_env("PersuasionActs").make().version == 0
    env = gym.make("scope/PersuasionActs-v1", simulator="mixture:population")
    observation, _ = env.reset(seed=0)
    assert env.unwrapped.dialogue.version == 1 and observation.shape == env.observation_space.shape


def test_a_refused_request_ends_the_episode_without_a_donation():
    batch = v1_batch()
    batch.step_agent(ONE, np.array([PROPOSITION]))
    batch.step_user(ONE, np.array([DISAGREE]))
    assert not batch.live[0] and batch.end_reason[0] == "refused" and batch.terminated[0]
    assert batch.agent_reward()[0] == 0.0
    v0 = ActsBatch(np.zeros((1, 5)), 12)
    v0.step_agent(ONE, np.array([PROPOSITION]))
    v0.step_user(ONE, np.array([DISAGREE]))
    assert v0.live[0], "version 0 keeps its rules"


def test_requests_beyond_the_corpus_bound_end_the_episode_and_are_counted_in_the_features():
    batch = v1_batch()
    limit = rules_of(1).max_requests
    assert limit == load_population().max_requests == 6
    for made in range(limit):
        batch.step_agent(ONE, np.array([ASK_AMOUNT]))
        features, _ = batch.user_features()
        assert features[0, USER_FEATURES_V1.index("requests")] == pytest.approx(made / 4.0), "requests made before"
        batch.step_user(ONE, np.array([NEUTRAL]))
    batch.step_agent(ONE, np.array([ASK_AMOUNT]))
    assert not batch.live[0] and batch.end_reason[0] == "request_limit" and batch.agent_reward()[0] == 0.0


def test_the_text_env_and_the_arrays_agree_for_the_population():
    env = find_env("PersuasionActs-v1").make(obs="features")
    env.reset(seed=3, options={"task_id": "test-00004"})
    simulator = make_policy("mixture:population")
    for act in ("greeting", "emotion-appeal", "ask-donation-amount"):
        observations, *_ = env.step({"agent": f"[{act}] ...", "user": None})
        if env.to_speak != "user":
            break
        features, _ = env.batch.user_features(ONE)
        assert np.allclose(observations["user"], features[0])
        reply = simulator.respond(env.views["user"], seed=1).text
        env.step({"agent": None, "user": reply})
    assert env.batch.personas[0, -1] == env.persona("test-00004")[-1]


@pytest.mark.parametrize(
    "spec",
    ["mixture:population", "mixture:population/vs5", "mixture:3@10/spread0.5", "mixture:3@10/vs5/spread0.5"],
)
def test_mixture_specs_round_trip(spec):
    simulator = make_policy(spec)
    assert simulator.name == spec and make_policy(simulator.name).name == spec


def test_bad_mixture_specs_say_what_is_expected():
    with pytest.raises(ValueError, match="mixture:population"):
        make_policy("mixture:population@3")
    with pytest.raises(ValueError, match="unknown option"):
        make_policy("mixture:3/warp2")


def test_sharpening_concentrates_the_type_prior_on_its_mode():
    prior = np.array([0.6, 0.3, 0.1])
    assert sharpened(prior, 1.0) == pytest.approx(prior)
    assert sharpened(prior, 10.0)[0] > 0.99
    quantiles = np.linspace(0.01, 0.99, 99)
    assert (type_at(sharpened(prior, 10.0), quantiles) == 0).mean() > (type_at(prior, quantiles) == 0).mean()


def test_sharpened_families_refuse_less_than_the_population_they_approximate():
    """Collapse where a refusal is what the agent must avoid: the aligned family's modal reply
    crowds out the minority refusals."""
    batch = v1_batch()
    batch.step_agent(ONE, np.array([PROPOSITION]))
    features, mask = batch.user_features()
    many = np.repeat(features, 4000, axis=0), np.repeat(mask, 4000, axis=0)
    rng = np.random.default_rng(0)
    refusals = {}
    for spec in ("mixture:population", "mixture:0@1/spread0", "mixture:0@10/spread0"):
        replies, _ = make_policy(spec).act(*many, rng)
        refusals[spec] = float((replies == DISAGREE).mean())
    assert refusals["mixture:0@1/spread0"] == pytest.approx(refusals["mixture:population"], abs=0.03)
    assert refusals["mixture:0@10/spread0"] < refusals["mixture:population"]


def test_the_corpus_fit_page_is_generated_from_the_shipped_fit():
    table = json.loads(POPULATION_PATH.read_text())
    assert (ROOT / "docs/study/v1/corpus_fit.md").read_text() == corpus_report(table)
    meta = table["meta"]
    best = max(meta["heldout_loglik_mean"], key=meta["heldout_loglik_mean"].get)
    assert meta["types_chosen"] <= int(best), "never more types than the best held-out likelihood supports"
    if meta["types_chosen"] == 1:
        assert "does not support" in corpus_report(table), "the docs say when the corpus shows no interaction"


@pytest.mark.slow
def test_refitting_on_the_corpus_gives_the_shipped_population():
    """`python -m scope_envs.persuasion_acts.fit_population` on the corpus (about 15 minutes)."""
    pytest.importorskip("scipy")
    pytest.importorskip("openpyxl")
    from scope_envs.persuasion_acts.fit_population import fit_population

    refit = fit_population(require(P4G))
    shipped = json.loads(POPULATION_PATH.read_text())
    assert refit["meta"]["types_chosen"] == shipped["meta"]["types_chosen"]
    assert np.allclose(refit["weights"], shipped["weights"], atol=2e-3)
    assert refit["max_requests"] == shipped["max_requests"]
