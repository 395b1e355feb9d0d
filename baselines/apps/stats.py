"""The statistics of evaluation: pass^k, bootstrap intervals, paired and two-sample comparisons.

* `pass_hat_k(successes, k)`: pass^k as defined by Yao et al. (2024), the chance that k trials of a task drawn from
  its n all succeed, `C(c, k) / C(n, k)` for c successes of n, averaged over tasks.
* `bootstrap_interval`: a percentile bootstrap over tasks (`scipy.stats.bootstrap`), the unit
  that is sampled when a benchmark's tasks are a sample of possible tasks.
* `paired_comparison`: two agents on the same tasks, the mean per-task difference with a
  bootstrap interval and a Wilcoxon signed-rank p-value.
* `welch_test`: two independent groups of runs (seeds); Holm's correction of a family of p-values
  is `scope_envs.core.stats.holm`, shared with the benchmarks' own analyses.
* `flip_rate`: how often a task's outcome differs between two identical runs.
* `minimum_detectable_difference`: the smallest true difference a two-sided test over n paired
  tasks detects with the given power (normal approximation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def _tasks_by_trials(successes: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """`[tasks, trials]` as a float array; every task needs the same number of trials."""
    try:
        array = np.asarray(successes, dtype=float)
    except ValueError as error:
        raise ValueError("successes must be tasks x trials with the same number of trials per task") from error
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"successes must be a non-empty tasks x trials array, got shape {array.shape}")
    if ((array != 0) & (array != 1)).any():
        raise ValueError("successes must be 0 or 1")
    return array


def pass_hat_k_per_task(successes: Sequence[Sequence[float]] | np.ndarray, k: int) -> np.ndarray:
    """Per task, the chance that `k` of its trials drawn without replacement all succeed."""
    array = _tasks_by_trials(successes)
    trials = array.shape[1]
    if not 1 <= k <= trials:
        raise ValueError(f"k must be between 1 and the number of trials per task ({trials}), got {k}")
    counts = array.sum(axis=1).astype(int)
    return np.array([math.comb(int(c), k) / math.comb(trials, k) for c in counts])


def pass_hat_k(successes: Sequence[Sequence[float]] | np.ndarray, k: int) -> float:
    """pass^k over tasks (Yao et al. 2024; k = 1 is the mean success)."""
    return float(pass_hat_k_per_task(successes, k).mean())


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    statistic: Callable[[np.ndarray], float] = np.mean,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """The statistic of `values` (one per task) and its percentile bootstrap interval. A constant
    sample, or a single value, has a zero-width interval."""
    from scipy import stats

    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or len(array) == 0:
        raise ValueError("bootstrap_interval needs a non-empty 1-D sample")
    value = float(statistic(array))
    if len(array) < 2 or np.all(array == array[0]):
        return Estimate(value, value, value)
    result = stats.bootstrap(
        (array,),
        lambda sample, axis=-1: np.apply_along_axis(statistic, axis, sample),
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(value, float(result.confidence_interval.low), float(result.confidence_interval.high))


@dataclass(frozen=True)
class PairedComparison:
    """`a - b` over the same tasks."""

    a: str
    b: str
    tasks: int
    difference: Estimate
    p_value: float

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "tasks": self.tasks, **self.difference.as_dict(), "p_value": self.p_value}


def paired_comparison(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    names: tuple[str, str] = ("a", "b"),
    seed: int = 0,
) -> PairedComparison:
    """Per-task scores of two agents on the same tasks: the mean difference, its bootstrap
    interval over tasks, and the two-sided Wilcoxon signed-rank p-value (1 when they never differ)."""
    from scipy import stats

    first, second = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if first.shape != second.shape or first.ndim != 1:
        raise ValueError(f"paired scores need one value per task for both, got shapes {first.shape} and {second.shape}")
    differences = first - second
    p_value = 1.0 if np.all(differences == 0) else float(stats.wilcoxon(differences).pvalue)
    return PairedComparison(names[0], names[1], len(differences), bootstrap_interval(differences, seed=seed), p_value)


@dataclass(frozen=True)
class WelchTest:
    """Two independent samples (e.g. seeds of two methods): `mean_a - mean_b`, its Welch 95%
    interval, the two-sided p-value and Cohen's d (pooled standard deviation)."""

    mean_a: float
    mean_b: float
    difference: float
    low: float
    high: float
    p_value: float
    cohen_d: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def welch_test(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95) -> WelchTest:
    from scipy import stats

    first, second = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(first) < 2 or len(second) < 2:
        raise ValueError("Welch's t-test needs at least two values in each sample")
    difference = float(first.mean() - second.mean())
    pooled = math.sqrt((first.var(ddof=1) + second.var(ddof=1)) / 2)
    if pooled == 0:  # two constant samples: no spread to test against
        sure = 0.0 if difference else 1.0
        d = math.copysign(math.inf, difference) if difference else 0.0
        return WelchTest(float(first.mean()), float(second.mean()), difference, difference, difference, sure, d)
    result = stats.ttest_ind(first, second, equal_var=False)
    interval = result.confidence_interval(confidence_level=confidence)
    return WelchTest(
        float(first.mean()),
        float(second.mean()),
        difference,
        float(interval.low),
        float(interval.high),
        float(result.pvalue),
        difference / pooled,
    )


@dataclass(frozen=True)
class PairedTest:
    """`a - b` paired by seed (each seed plays one training family in both arms, so the family is a
    random intercept that pairing removes): the mean difference, its t-interval, the two-sided
    paired t-test p-value and the standard deviation of the differences."""

    difference: float
    low: float
    high: float
    p_value: float
    sd: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def paired_t_test(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95) -> PairedTest:
    from scipy import stats

    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if differences.ndim != 1 or len(differences) < 2:
        raise ValueError("a paired t-test needs at least two pairs")
    n, mean, sd = len(differences), float(differences.mean()), float(differences.std(ddof=1))
    if sd == 0:
        return PairedTest(mean, mean, mean, 0.0 if mean else 1.0, 0.0, n)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    p_value = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return PairedTest(mean, mean - half, mean + half, p_value, sd, n)


def minimum_detectable_effect(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean paired difference a two-sided paired t-test at level `alpha` detects with
    probability `power` over `n` pairs whose differences have standard deviation `sd`: Student's t
    quantiles, for the few seeds of a study (`minimum_detectable_difference` is its normal form for
    many tasks)."""
    from scipy import stats

    if n < 2:
        return math.inf
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n))


def flip_rate_per_task(successes: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Per task, the chance that two of its trials drawn without replacement disagree:
    `2 c (n - c) / (n (n - 1))` for c successes in n trials (an unbiased estimate of `2 p (1 - p)`)."""
    array = _tasks_by_trials(successes)
    trials = array.shape[1]
    if trials < 2:
        raise ValueError("a flip rate needs at least two trials per task")
    counts = array.sum(axis=1)
    return 2 * counts * (trials - counts) / (trials * (trials - 1))


def flip_rate(successes: Sequence[Sequence[float]] | np.ndarray) -> float:
    """The chance that a task's outcome flips between two identical runs, averaged over tasks."""
    return float(flip_rate_per_task(successes).mean())


def mixed_share(successes: Sequence[Sequence[float]] | np.ndarray) -> float:
    """The share of tasks whose trials do not all agree (grows with the number of trials)."""
    array = _tasks_by_trials(successes)
    return float(np.mean(array.min(axis=1) != array.max(axis=1)))


ALPHA = 0.05
POWER = 0.8


def minimum_detectable_difference(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """`(z_{1 - alpha/2} + z_{power}) * sd / sqrt(n)`: the true mean difference that a two-sided
    test at level `alpha` over `n` paired units, whose differences have standard deviation `sd`,
    detects with probability `power`."""
    from scipy import stats

    if n < 1 or sd < 0 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("minimum_detectable_difference needs n >= 1, sd >= 0, 0 < alpha < 1 and 0 < power < 1")
    return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * sd / math.sqrt(n))
