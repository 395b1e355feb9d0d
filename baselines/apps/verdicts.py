"""What a remedy comparison concludes: the manipulation checks, then one verdict rule, shared by
`scope demo` and the remedy study (docs/study/v2/preregistration.md states it before any run).

Every outcome is held-out success, and every comparison is paired by seed (each seed trains
against its own family in every arm, so the family is a random intercept that pairing removes).

Manipulation checks, before any remedy is judged:

* the positive control `G` = `heldout` - `single`: what a perfect remedy would recover. It splits
  exactly into a **sharpening part**, `unsharpened` - `single` (single-simulator RL against the same
  family unsharpened: what undoing the family's alignment sharpening recovers) and a **family
  part**, `heldout` - `unsharpened` (the training family's own quirks, out of reach of any remedy
  that starts inside the family);
* each remedy's **ceiling**: the arm that stands for the remedy done perfectly, minus `single`.
  Verbalized Sampling at best restores the unsharpened family (`unsharpened`); a diversity remedy
  (co-training, a population) at best trains against varied simulators like the held-out ones
  (`diverse`, an ensemble of unsharpened families never evaluated on).

The smallest effect of interest (SESOI) is G / 2. A remedy is judged only where G is confirmed
(its 95% interval lies above 0) and its ceiling reaches the SESOI; otherwise it is "not testable
here", never a null. The verdict rule:

* **helps**: the Holm-adjusted p-value (over the remedies judged together) is below alpha and the
  difference is positive;
* **negligible**: the one-sided 95% upper bound of the difference lies below the SESOI (this
  includes a harm: `harms` marks an interval wholly below 0);
* **inconclusive**: neither.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from baselines.apps.stats import PairedTest, paired_t_test
from scope_envs.core.stats import holm

ALPHA = 0.05
POWER = 0.8
CONTROL = ("heldout", "single")
UNSHARPENED, DIVERSE = "unsharpened", "diverse"
CEILING_OF = {"vs": UNSHARPENED, "vs_prob": UNSHARPENED, "cotrain": DIVERSE, "population": DIVERSE}
CHECK_ARMS = ("single", "heldout", UNSHARPENED, DIVERSE)
NOT_TESTABLE, HELPS, NEGLIGIBLE, INCONCLUSIVE = "not testable here", "helps", "negligible", "inconclusive"


def power_of_paired_t(effect: float, sd: float, n: int, *, alpha: float = ALPHA) -> float:
    """The chance that a two-sided paired t-test at `alpha` over `n` pairs rejects, when the true
    mean difference is `effect` and the differences have standard deviation `sd` (noncentral t)."""
    from scipy import stats

    if n < 2:
        return float("nan")
    if sd <= 0:
        return 1.0 if effect else alpha
    df, shift = n - 1, abs(effect) / (sd / math.sqrt(n))  # a two-sided test: symmetric in the effect
    critical = stats.t.ppf(1 - alpha / 2, df)
    # scipy's noncentral t returns NaN far in its tails (a shift of about 10 and more), where the
    # rejections on the wrong side are below 1e-20 and those on the right side all but certain
    wrong_side = stats.nct.cdf(-critical, df, shift) if shift < 8 else 0.0
    right_side = stats.nct.sf(critical, df, shift) if shift < 37 else 1.0
    return float(right_side + wrong_side)


def seeds_for_power(effect: float, sd: float, *, alpha: float = ALPHA, power: float = POWER, limit: int = 1000) -> int:
    """The fewest seeds at which a paired t-test at `alpha` detects `effect` with `power`."""
    if effect <= 0:
        raise ValueError("the effect to detect must be positive")
    enough = next((n for n in range(2, limit) if power_of_paired_t(effect, sd, n, alpha=alpha) >= power), None)
    if enough is None:
        raise ValueError(f"{limit} seeds do not detect {effect:.3g} at SD {sd:.3g} with power {power}")
    return enough


def upper_bound(test: PairedTest, confidence: float = 0.95) -> float:
    """The one-sided `confidence` upper bound of a paired difference."""
    from scipy import stats

    if test.sd == 0:
        return test.difference
    return float(test.difference + stats.t.ppf(confidence, test.n - 1) * test.sd / math.sqrt(test.n))


@dataclass(frozen=True)
class ManipulationChecks:
    """G, its two parts and each ceiling (all paired by seed, None where an arm is missing)."""

    gap: PairedTest | None
    sharpening: PairedTest | None
    family: PairedTest | None
    ceilings: dict[str, PairedTest]  # by ceiling arm: `unsharpened`, `diverse`

    @property
    def confirmed(self) -> bool:
        return self.gap is not None and self.gap.low > 0

    @property
    def sesoi(self) -> float:
        """The smallest effect of interest: half of G (nan without a positive control)."""
        return self.gap.difference / 2 if self.gap is not None else float("nan")

    def as_dict(self) -> dict[str, Any]:
        def plain(test: PairedTest | None) -> dict[str, float] | None:
            return None if test is None else test.as_dict()

        return {
            "positive_control": plain(self.gap),
            "confirmed": self.confirmed,
            "sesoi": self.sesoi,
            "sharpening_part": plain(self.sharpening),
            "family_part": plain(self.family),
            "ceilings": {arm: test.as_dict() for arm, test in self.ceilings.items()},
        }


def manipulation_checks(outcomes: Mapping[str, Sequence[float]]) -> ManipulationChecks:
    """The checks from each arm's outcomes, in seed order (arms with fewer than two seeds count as missing)."""

    def paired(a: str, b: str) -> PairedTest | None:
        if min(len(outcomes.get(a, ())), len(outcomes.get(b, ()))) < 2:
            return None
        return paired_t_test(outcomes[a], outcomes[b])

    ceilings = {arm: test for arm in (UNSHARPENED, DIVERSE) if (test := paired(arm, "single")) is not None}
    return ManipulationChecks(paired(*CONTROL), ceilings.get(UNSHARPENED), paired("heldout", UNSHARPENED), ceilings)


@dataclass(frozen=True)
class Verdict:
    """One remedy minus single-simulator RL, and what the rule concludes."""

    remedy: str
    verdict: str
    reason: str
    test: PairedTest | None = None
    adjusted_p: float = float("nan")
    upper_bound: float = float("nan")
    power: float = float("nan")  # of the test at the SESOI, at the Holm family's first-step alpha
    harms: bool = False

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["test"] = None if self.test is None else self.test.as_dict()
        return record


def untestable_reason(remedy: str, checks: ManipulationChecks, sesoi: float) -> str | None:
    """Why `remedy` cannot be judged here (None: it can)."""
    ceiling = checks.ceilings.get(CEILING_OF.get(remedy, ""))
    if not checks.confirmed:
        return "the positive control G is not confirmed"
    if ceiling is None:
        return f"its ceiling ({CEILING_OF.get(remedy)}) was not run"
    if ceiling.difference < sesoi:
        return f"its ceiling {ceiling.difference:+.3f} is below the smallest effect of interest {sesoi:.3f}"
    return None


def remedy_tests(outcomes: Mapping[str, Sequence[float]], remedies: Sequence[str]) -> dict[str, PairedTest]:
    """Each remedy run in `outcomes` minus single-simulator RL, paired by seed (none without `single`)."""
    if len(outcomes.get("single", ())) < 2:
        return {}
    return {r: paired_t_test(outcomes[r], outcomes["single"]) for r in remedies if len(outcomes.get(r, ())) >= 2}


def remedy_verdicts(
    outcomes: Mapping[str, Sequence[float]],
    remedies: Sequence[str],
    checks: ManipulationChecks,
    *,
    sesoi: float | None = None,
    adjusted: Mapping[str, float] | None = None,
    family_size: int | None = None,
) -> list[Verdict]:
    """The verdict on each remedy run in `outcomes`. `sesoi` defaults to G / 2. The Holm
    correction runs over the remedies judged here, unless `adjusted` gives each judged remedy's
    Holm-adjusted p-value from a larger family (of `family_size` tests; a study over testbeds)."""
    sesoi = checks.sesoi if sesoi is None else sesoi
    tests = remedy_tests(outcomes, remedies)
    reasons = {remedy: untestable_reason(remedy, checks, sesoi) for remedy in tests}
    judged = [remedy for remedy, reason in reasons.items() if reason is None]
    if adjusted is None:
        adjusted = dict(zip(judged, holm([tests[r].p_value for r in judged])))
    family = family_size or len(judged)
    verdicts = []
    for remedy, test in tests.items():
        if reasons[remedy] is not None:
            verdicts.append(Verdict(remedy, NOT_TESTABLE, reasons[remedy], test))
            continue
        p, bound = adjusted[remedy], upper_bound(test)
        if p < ALPHA and test.difference > 0:
            verdict, reason = HELPS, f"Holm p {p:.2g} < {ALPHA}"
        elif bound < sesoi:
            verdict, reason = NEGLIGIBLE, f"one-sided 95% upper bound {bound:+.3f} < {sesoi:.3f}"
        else:
            verdict, reason = INCONCLUSIVE, "neither above 0 after Holm nor bounded below the smallest effect"
        power = power_of_paired_t(sesoi, test.sd, test.n, alpha=ALPHA / max(family, 1))
        verdicts.append(Verdict(remedy, verdict, reason, test, p, bound, power, harms=test.high < 0))
    return verdicts
