"""The manipulation checks and the verdict rule that `scope demo` and the remedy study share."""

import numpy as np
import pytest

pytest.importorskip("scipy")

from baselines.apps.verdicts import (
    HELPS,
    INCONCLUSIVE,
    NEGLIGIBLE,
    NOT_TESTABLE,
    manipulation_checks,
    power_of_paired_t,
    remedy_verdicts,
    seeds_for_power,
)

SEEDS = 30
rng = np.random.default_rng(7)
SINGLE = list(0.40 + 0.03 * rng.standard_normal(SEEDS))


def shifted(by: float, noise: float = 0.01, seed: int = 0) -> list[float]:
    jitter = np.random.default_rng(seed).standard_normal(SEEDS)
    return [s + by + noise * j for s, j in zip(SINGLE, jitter)]


def arms(**extra: list[float]) -> dict[str, list[float]]:
    return {"single": SINGLE, "heldout": shifted(0.20, seed=1), "unsharpened": shifted(0.14, seed=2), **extra}


def test_power_matches_the_paired_t_test_tables():
    # Cohen's d 0.5 needs 34 pairs for 80% power at alpha 0.05, two-sided (G*Power: 0.8078)
    assert power_of_paired_t(0.5, 1.0, 34) == pytest.approx(0.8078, abs=0.002)
    assert seeds_for_power(0.5, 1.0) == 34
    assert power_of_paired_t(0.0, 1.0, 34) == pytest.approx(0.05, abs=1e-9), "no effect: the test's level"
    # far from zero (a shift of 31 standard errors): certain, where scipy's noncentral t gives NaN
    assert power_of_paired_t(0.117, 0.0146, 15, alpha=0.05 / 6) == pytest.approx(1.0)
    assert power_of_paired_t(-0.117, 0.0146, 15, alpha=0.05 / 6) == pytest.approx(1.0)
    assert power_of_paired_t(0.117, 0.0486, 15, alpha=0.05 / 6) == pytest.approx(1.0, abs=1e-6)


def test_g_splits_exactly_into_its_sharpening_and_family_parts():
    checks = manipulation_checks(arms(diverse=shifted(0.15, seed=3)))
    assert checks.confirmed and checks.sesoi == pytest.approx(checks.gap.difference / 2)
    assert checks.sharpening.difference + checks.family.difference == pytest.approx(checks.gap.difference)
    assert set(checks.ceilings) == {"unsharpened", "diverse"}


def test_each_verdict_of_the_rule():
    outcomes = arms(
        diverse=shifted(0.15, seed=3),
        vs=shifted(0.08, seed=4),  # clearly above 0: helps
        population=shifted(0.0, noise=0.005, seed=5),  # tightly around 0: negligible
        cotrain=shifted(0.05, noise=0.2, seed=6),  # too noisy to say
    )
    verdicts = {
        v.remedy: v for v in remedy_verdicts(outcomes, ("vs", "population", "cotrain"), manipulation_checks(outcomes))
    }
    assert verdicts["vs"].verdict == HELPS
    assert verdicts["population"].verdict == NEGLIGIBLE and verdicts["population"].upper_bound < 0.1
    assert verdicts["cotrain"].verdict == INCONCLUSIVE
    assert all(0 < v.power <= 1 for v in verdicts.values())


def test_a_harm_is_negligible_and_marked():
    outcomes = arms(diverse=shifted(0.15, seed=3), population=shifted(-0.05, seed=5))
    (verdict,) = remedy_verdicts(outcomes, ("population",), manipulation_checks(outcomes))
    assert verdict.verdict == NEGLIGIBLE and verdict.harms


def test_a_remedy_whose_ceiling_is_below_the_smallest_effect_is_not_testable_never_a_null():
    low_ceiling = arms(diverse=shifted(0.02, seed=3), population=shifted(0.0, noise=0.005, seed=5))
    (verdict,) = remedy_verdicts(low_ceiling, ("population",), manipulation_checks(low_ceiling))
    assert verdict.verdict == NOT_TESTABLE and "ceiling" in verdict.reason
    no_ceiling = arms(population=shifted(0.0, seed=5))
    (verdict,) = remedy_verdicts(no_ceiling, ("population",), manipulation_checks(no_ceiling))
    assert verdict.verdict == NOT_TESTABLE and "not run" in verdict.reason


def test_nothing_is_judged_without_a_confirmed_positive_control():
    outcomes = {**arms(vs=shifted(0.08, seed=4)), "heldout": shifted(0.0, noise=0.05, seed=1)}
    (verdict,) = remedy_verdicts(outcomes, ("vs",), manipulation_checks(outcomes))
    assert verdict.verdict == NOT_TESTABLE and "positive control" in verdict.reason


def test_holm_runs_over_the_family_a_study_passes():
    outcomes = arms(vs=shifted(0.02, noise=0.04, seed=4))
    checks = manipulation_checks(outcomes)
    (alone,) = remedy_verdicts(outcomes, ("vs",), checks)
    (in_family,) = remedy_verdicts(outcomes, ("vs",), checks, adjusted={"vs": min(1.0, alone.adjusted_p * 4)})
    assert in_family.adjusted_p == pytest.approx(min(1.0, alone.adjusted_p * 4))
