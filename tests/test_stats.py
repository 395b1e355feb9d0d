"""pass^k, bootstrap intervals, paired and Welch comparisons, Holm: on hand-built cases."""

import itertools
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from baselines.apps.stats import (
    bootstrap_interval,
    flip_rate,
    minimum_detectable_difference,
    mixed_share,
    paired_comparison,
    pass_hat_k,
    pass_hat_k_per_task,
    welch_test,
)
from scope_envs.core.stats import holm

# three tasks, four trials: always, half the time, never
TRIALS = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]]


def test_pass_hat_k_is_taus_definition_on_a_hand_built_case():
    # per task C(c, k) / C(n, k): c = 4, 2, 0 of n = 4
    assert pass_hat_k_per_task(TRIALS, 1).tolist() == [1.0, 0.5, 0.0]
    assert pass_hat_k(TRIALS, 1) == pytest.approx(1.5 / 3)
    assert pass_hat_k(TRIALS, 2) == pytest.approx((1 + 1 / 6) / 3)  # C(2,2)/C(4,2) = 1/6
    assert pass_hat_k(TRIALS, 3) == pytest.approx(1 / 3)  # C(2,3) = 0
    assert pass_hat_k(TRIALS, 4) == pytest.approx(1 / 3)


def test_pass_hat_k_never_rises_with_k():
    rng = np.random.default_rng(0)
    trials = rng.random((50, 6)) < 0.6
    values = [pass_hat_k(trials.astype(float), k) for k in range(1, 7)]
    assert all(a >= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(
    ("successes", "k", "message"),
    [
        (TRIALS, 0, "k must be between 1"),
        (TRIALS, 5, "k must be between 1"),
        ([[1, 0.5]], 1, "0 or 1"),
        ([[1, 0], [1]], 1, "same number of trials"),
        ([], 1, "non-empty"),
    ],
)
def test_pass_hat_k_refuses_bad_input_clearly(successes, k, message):
    with pytest.raises(ValueError, match=message):
        pass_hat_k(successes, k)


def test_a_constant_sample_has_a_zero_width_interval():
    estimate = bootstrap_interval([0.5] * 10)
    assert (estimate.value, estimate.low, estimate.high) == (0.5, 0.5, 0.5)
    assert bootstrap_interval([0.3]).low == 0.3


def test_the_bootstrap_interval_of_a_mean_has_the_normal_width():
    values = np.array([1.0, 0.0] * 200)  # mean 0.5, standard error sqrt(0.25 / 400) = 0.025
    estimate = bootstrap_interval(values, seed=3)
    assert estimate.value == 0.5
    assert estimate.low < 0.5 < estimate.high
    assert 0.08 < estimate.high - estimate.low < 0.12  # 2 x 1.96 x 0.025 = 0.098
    assert bootstrap_interval(values, seed=3) == estimate, "a seed fixes the interval"


def test_paired_comparison_of_equal_and_dominating_agents():
    same = paired_comparison([1, 0, 1, 0], [1, 0, 1, 0], names=("x", "y"))
    assert (same.difference.value, same.p_value, same.a, same.b) == (0.0, 1.0, "x", "y")
    better = np.linspace(0.5, 1.0, 30)
    result = paired_comparison(better, better - 0.2 - np.linspace(0, 0.05, 30))
    assert result.difference.low > 0 and result.p_value < 0.01
    with pytest.raises(ValueError, match="one value per task"):
        paired_comparison([1, 0], [1, 0, 1])


def test_welch_test_matches_the_textbook_formulas():
    result = welch_test([1, 2, 3, 4], [2, 3, 4, 5])
    standard_error = math.sqrt(5 / 3 / 4 + 5 / 3 / 4)  # both variances 5/3, n = 4; Welch df = 6
    assert result.difference == -1.0
    assert result.low == pytest.approx(-1 - 2.4469 * standard_error, rel=1e-4)
    assert result.high == pytest.approx(-1 + 2.4469 * standard_error, rel=1e-4)
    assert 0.2 < result.p_value < 0.4
    assert result.cohen_d == pytest.approx(-1 / math.sqrt(5 / 3))
    with pytest.raises(ValueError, match="at least two"):
        welch_test([1], [1, 2])


def test_welch_test_of_two_constant_samples():
    assert welch_test([0.5, 0.5], [0.5, 0.5]).p_value == 1.0
    assert welch_test([1.0, 1.0], [0.0, 0.0]).p_value == 0.0


def test_holm_adjusts_step_down_and_keeps_the_order():
    # sorted 0.01, 0.03, 0.04 -> 3 x 0.01, max(0.03, 2 x 0.03), max(0.06, 1 x 0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    assert holm([]) == []


def test_flip_rate_is_the_chance_two_trials_of_a_task_disagree():
    successes = [[1, 1, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert flip_rate(successes) == pytest.approx((0 + 0 + 2 / 3 + 2 / 3) / 4)
    assert mixed_share(successes) == 0.5
    by_pairs = np.mean([[a != b for a, b in itertools.combinations(task, 2)] for task in successes])
    assert flip_rate(successes) == pytest.approx(by_pairs)
    with pytest.raises(ValueError, match="at least two trials"):
        flip_rate([[1], [0]])


def test_the_minimum_detectable_difference_has_its_stated_power():
    assert minimum_detectable_difference(0.5, 100) == pytest.approx((1.959964 + 0.841621) * 0.05, rel=1e-5)
    mde = minimum_detectable_difference(1.0, 50)
    rng = np.random.default_rng(0)
    samples = rng.normal(mde, 1.0, size=(20000, 50))
    z = samples.mean(axis=1) / (1.0 / math.sqrt(50))
    assert np.mean(np.abs(z) > 1.959964) == pytest.approx(0.8, abs=0.01)
    assert minimum_detectable_difference(1.0, 50, power=0.9) > mde
    with pytest.raises(ValueError):
        minimum_detectable_difference(1.0, 0)
