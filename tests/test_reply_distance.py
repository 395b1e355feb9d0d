"""The fidelity checks' distance between act-level simulators, on probe states of the testbed."""

import numpy as np
import pytest

from scope_envs.core.registration import find_env
from scope_envs.core.sampling import sample_rows
from scope_envs.persuasion_acts.probes import user_states
from sims.reply_distance import mean_total_variation, reply_distribution


class Fixed:
    """Replies with the same probabilities in every state; `exact` says whether it states them."""

    def __init__(self, probabilities, exact=True):
        self.probabilities = np.asarray(probabilities, float)
        if exact:
            self.distribution = lambda features, mask: np.tile(self.probabilities, (len(features), 1))

    def act(self, features, mask, rng):
        return sample_rows(np.log(np.tile(self.probabilities, (len(features), 1))), rng)


def test_the_distance_is_half_the_l1_distance_per_state():
    features, mask = np.zeros((3, 2)), np.ones((3, 3), bool)
    a, b = Fixed([0.5, 0.5, 0.0]), Fixed([0.25, 0.25, 0.5])
    assert mean_total_variation(a, b, features, mask, rng=np.random.default_rng(0)) == pytest.approx(0.5)
    assert mean_total_variation(a, a, features, mask, rng=np.random.default_rng(0)) == 0.0


def test_a_simulator_without_a_stated_distribution_is_estimated_from_its_replies():
    features, mask = np.zeros((4, 2)), np.ones((4, 3), bool)
    estimated = reply_distribution(
        Fixed([0.2, 0.3, 0.5], exact=False), features, mask, draws=20000, rng=np.random.default_rng(1)
    )
    assert estimated.shape == (4, 3) and np.allclose(estimated, [0.2, 0.3, 0.5], atol=0.02)


@pytest.mark.parametrize("env_id", ["PersuasionActs", "PersuasionActs-v1"])
def test_probe_states_cover_the_conversation_and_are_fixed(env_id):
    env = find_env(env_id).make()
    features, mask = user_states(env, 200)
    again, _ = user_states(env, 200)
    assert features.shape[0] == 200 and np.array_equal(features, again)
    requests = mask.sum(axis=1) > 4  # donation decisions are allowed only after a request
    assert 0.1 < requests.mean() < 0.9, "both requests and other turns are probed"


@pytest.mark.parametrize(
    "spec", ["mixture:7@10/spread1", "mixture:7@10/vs5/spread1", "mixture:7@3/vs5prob/spread1", "mixture:7@10/vs3"]
)
def test_a_familys_stated_distribution_is_the_one_it_draws_from(spec):
    """Verbalized Sampling's exact reply probabilities (summed over every candidate list) against
    its own draws: 40,000 per state, so each estimated probability is within 0.01 of the truth."""
    from scope_envs.core.specs import make_policy

    env = find_env("PersuasionActs-v1").make()
    features, mask = user_states(env, 12)
    simulator = make_policy(spec, env=env, side="user")
    stated = simulator.distribution(features, mask)
    assert np.allclose(stated.sum(axis=1), 1.0) and not stated[~mask].any()
    drawn = reply_distribution(_Drawn(simulator), features, mask, draws=40000, rng=np.random.default_rng(3))
    assert np.abs(stated - drawn).max() < 0.01


class _Drawn:
    """A simulator's `act` alone: its distribution estimated from its replies."""

    def __init__(self, simulator):
        self.act = simulator.act


def test_verbalized_sampling_draws_differ_and_random_is_uniform_over_the_listed():
    from scope_envs.core.specs import make_policy

    env = find_env("PersuasionActs-v1").make()
    features, mask = user_states(env, 50)
    uniform = make_policy("mixture:7@10/vs5/spread1", env=env, side="user").distribution(features, mask)
    by_probability = make_policy("mixture:7@10/vs5prob/spread1", env=env, side="user").distribution(features, mask)
    few = mask.sum(axis=1) <= 5  # every allowed reply is listed: the random draw is uniform over them
    np.testing.assert_allclose(
        uniform[few][mask[few]], (1 / mask.sum(axis=1, keepdims=True))[few].repeat(10, 1)[mask[few]]
    )
    assert np.abs(uniform - by_probability).sum(axis=1).mean() > 0.1
