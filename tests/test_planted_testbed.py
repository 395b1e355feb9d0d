"""The mechanism testbed (PersuasionActsPlanted, a mechanism test and not a claim about P4G): its planted
act x type interaction matters, collapse removes the minority, its study keeps the family spread small,
and it plays with its defaults."""

from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from scope_envs.core.registration import find_env
from scope_envs.core.specs import make_policy
from scope_envs.persuasion_acts.env import rules_of
from scope_envs.persuasion_acts.planted import MAJORITY, MINORITY, planted_population, population_for
from scope_envs.persuasion_acts.planted_measure import majority_best_loss, success_table
from scope_envs.persuasion_acts.population import (
    TEMPERAMENT,
    USER_FEATURES_V1,
    Population,
    load_population,
    sharpened,
    type_at,
)

# The smallest loss of the majority's best persuader against the population that makes the testbed
# a test of collapse: the smallest effect of interest the pre-registration fixed for it (G / 2).
DESIGN = Path(__file__).resolve().parents[1] / "scope_envs/persuasion_acts/remedy_studies/remedies_v2.yaml"
SMALLEST_EFFECT_OF_INTEREST = yaml.safe_load(DESIGN.read_text())["sesoi"]["mechanism"]
STUDY = Path(__file__).resolve().parents[1] / "scope_envs/persuasion_acts/studies/mechanism.yaml"


def test_the_persuader_best_against_the_majority_loses_against_the_population():
    table = success_table()
    for_majority, for_population, loss = majority_best_loss(table)
    assert for_majority == "ask at once" and "appeal" in for_population
    assert table[for_majority]["minority"] < table[for_population]["minority"], "the minority is who it fails"
    assert loss >= SMALLEST_EFFECT_OF_INTEREST


def test_without_the_interaction_the_loss_vanishes():
    """Both types given the majority's replies: the measure finds no loss, so the one above is the
    planted interaction's."""
    planted = planted_population()
    shared = replace(planted, weights=np.repeat(planted.weights[[MAJORITY]], planted.types, axis=0))
    _, _, loss = majority_best_loss(success_table(shared))
    assert loss < SMALLEST_EFFECT_OF_INTEREST / 2


def test_sharpening_at_gamma_10_leaves_the_minority_below_three_percent():
    env = find_env("PersuasionActsPlanted").make()
    temperament = np.concatenate([env.personas["train"][:, -1], env.personas["test"][:, -1]])
    prior = planted_population().prior
    assert (type_at(prior, temperament) == MINORITY).mean() > 0.3, "unsharpened, the minority is there"
    assert (type_at(sharpened(prior, 10.0), temperament) == MINORITY).mean() < 0.03
    features = np.zeros((len(temperament), len(USER_FEATURES_V1)))
    features[:, TEMPERAMENT] = temperament
    family = make_policy("planted:7@10/spread0.25")
    assert (family.types_of(features) == MINORITY).mean() < 0.03
    assert (family.types_of(features, verbalized=True) == MINORITY).mean() > 0.3, "VS reads the unsharpened prior"


def test_the_mechanism_study_keeps_the_family_spread_small_next_to_the_planted_signal():
    study = yaml.safe_load(STUDY.read_text())
    assert study["env"] == "PersuasionActsPlanted" and study["spread"] <= 0.25
    assert "mechanism test" in STUDY.read_text() and study["target"] == "planted:population"
    spec = study["train_simulator"].format(train_family=1000, gamma=10.0, spread=study["spread"])
    assert make_policy(spec).name == spec == "planted:1000@10/spread0.25"


def test_the_planted_population_is_a_population_with_version_ones_rules_and_no_fit():
    planted = population_for(2)
    assert isinstance(planted, Population) and planted is planted_population()
    assert planted.types == 2 and planted.prior[MAJORITY] > planted.prior[MINORITY]
    assert "not a claim about P4G" in planted.meta["planted"]
    assert not planted.family_weights(3, 0.25)[..., TEMPERAMENT].any(), "the type comes from the temperament"
    assert rules_of(2).refusal_ends and rules_of(2).max_requests == rules_of(1).max_requests
    assert population_for(1) is load_population()
    with pytest.raises(ValueError, match="no persuadee population"):
        population_for(0)


@pytest.mark.parametrize("spec", ["planted:population", "planted:population/vs5", "planted:7@10/vs5prob/spread0.25"])
def test_planted_specs_round_trip(spec):
    assert make_policy(spec).name == spec


def test_the_registered_env_is_labelled_and_plays_to_the_end_with_its_defaults():
    info = find_env("scope/PersuasionActsPlanted-v0")
    assert "not a claim about P4G" in info.description and info.kwargs == {"version": 2}
    env = gym.make("scope/PersuasionActsPlanted-v0")
    assert env.unwrapped.dialogue.version == 2
    assert make_policy("scripted", env=env.unwrapped.dialogue, side="user").name == "planted:population"
    env.action_space.seed(0)
    env.reset(seed=0)
    for _ in range(100):
        _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            break
    assert (terminated or truncated) and np.isfinite(reward)


def test_a_co_trained_simulator_starts_as_every_type_of_its_family(tmp_path):
    """Started from a family of the planted population, the trainable simulator is that family
    exactly, the minority type included (not its modal type alone), and saves and loads as such."""
    from baselines.training.act_policy import build_act_policy
    from scope_envs.persuasion_acts.probes import user_states

    env = find_env("PersuasionActsPlanted").make()
    features, mask = user_states(env, 300)
    family = make_policy("planted:4001/spread0.25", env=env, side="user")
    policy = build_act_policy("planted:4001/spread0.25", env=env, side="user", temperature=1.0)
    np.testing.assert_allclose(policy.act_distribution(features, mask), family.distribution(features, mask), atol=1e-12)
    modal_only = build_act_policy("linear", env=env, side="user", temperature=1.0)
    modal_only.model.weight.data[:] = torch_tensor(family.linear_weights())
    assert (
        np.abs(modal_only.act_distribution(features, mask) - family.distribution(features, mask)).sum(1).mean() > 0.05
    )
    policy.save(tmp_path)
    again = build_act_policy("planted:4001/spread0.25", env=env, side="user", temperature=1.0)
    again.model.weight.data.zero_()
    again.load_weights(tmp_path)
    np.testing.assert_array_equal(again.act_distribution(features, mask), policy.act_distribution(features, mask))


def torch_tensor(array):
    import torch

    return torch.tensor(array)
