"""The remedy study (docs/study/v2/preregistration.md): does a remedy for simulator collapse work?

    python -m baselines.apps.remedy_study pilot     # the manipulation checks' arms at the pilot seeds
    python -m baselines.apps.remedy_study plan      # from the pilot: the smallest effect of interest and the seeds
    python -m baselines.apps.remedy_study run       # every arm at the confirmatory seeds
    python -m baselines.apps.remedy_study analyze   # checks, tests, Holm, verdicts; results.md/json, runs.jsonl
    python -m baselines.apps.study verify --docs docs/study/v2 --sample 5   # reruns recorded runs bit for bit

The testbeds, seeds and smallest effects of interest are the shipped design's (`remedies_v2`, in
its benchmark's `remedy_studies/` folder). On each testbed, every seed trains an agent with every
arm (`scope demo`'s arms, same trainer): the manipulation checks' arms first (single, heldout,
unsharpened, diverse; `baselines.apps.verdicts`), then the remedies (Verbalized Sampling as the
paper's main runs draw, Population Co-Training as the paper runs it). Each remedy is one paired
comparison against single-simulator RL, gated on G and on its ceiling, with Holm over every remedy
judged on either testbed, and the verdict rule of `baselines.apps.verdicts`.

Runs, their records and their verification are the v1 study's machinery (`baselines.apps.study`):
portable kernels, a committed tree, one commit per record.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from baselines.apps.demo import LABELS, DemoSettings, mean_interval, pool_diversity, run_config, vs_fidelity
from baselines.apps.provenance import provenance
from baselines.apps.study import FINAL, check_provenance, run_configs, write_record
from baselines.apps.verdicts import (
    ALPHA,
    CHECK_ARMS,
    NOT_TESTABLE,
    POWER,
    ManipulationChecks,
    manipulation_checks,
    remedy_tests,
    remedy_verdicts,
    seeds_for_power,
    untestable_reason,
)
from baselines.training.rollouts import HELDOUT_SUCCESS
from scope_envs.core.jsonable import finite_or_null
from scope_envs.core.stats import holm


@dataclass(frozen=True)
class Testbed:
    name: str
    study: str  # the `scope demo` study config
    gamma: float
    spread: float
    about: str


DESIGN = "remedies_v2"  # the shipped design: `scope_envs/<benchmark>/remedy_studies/remedies_v2.yaml`
# Verbalized Sampling as the paper's main runs draw (uniform over the k listed) and as its ablation
# draws (by the verbalized probabilities); Population Co-Training as the paper runs it.
REMEDIES = ("vs", "vs_prob", "population")
ARMS = (*CHECK_ARMS, *REMEDIES)


@lru_cache(maxsize=1)
def design() -> dict[str, Any]:
    from baselines.training.config import find_config

    with find_config(DESIGN, kind="remedy_studies").open() as file:
        return yaml.safe_load(file)


def testbeds() -> tuple[Testbed, ...]:
    return tuple(Testbed(**testbed) for testbed in design()["testbeds"])


def pilot_seeds() -> tuple[int, ...]:
    return tuple(range(*design()["pilot_seeds"]))


def confirmatory_seeds() -> dict[str, tuple[int, ...]] | None:
    """Per testbed, fixed by the pre-registration from the pilot's power analysis; None before it."""
    seeds = design()["confirmatory_seeds"]
    return None if seeds is None else {name: tuple(range(*span)) for name, span in seeds.items()}


def sesoi() -> dict[str, float] | None:
    """The smallest effect of interest per testbed (the pilot's G / 2), fixed by the pre-registration."""
    return design()["sesoi"]


OUT = Path("runs/study-v2")
PILOT_OUT = Path("runs/study-v2-pilot")
DOCS = Path("docs/study/v2")
# Every run: 200 steps of 16 groups of 8 episodes; held-out success once, at the end, on 4,000
# episodes (the 200 test personas x 20), whose binomial noise is a small part of the seed-to-seed SD.
BASE = DemoSettings(steps=200, groups=16, group_size=8, eval_every=200, eval_tasks=200, eval_samples=20, panel=0)


def settings_for(testbed: Testbed, out: Path) -> DemoSettings:
    return replace(BASE, study=testbed.study, gamma=testbed.gamma, spread=testbed.spread, out=str(out / testbed.name))


def plan_runs(out: Path, arms: tuple[str, ...], seeds: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """The trainer configs of every (testbed, arm, seed) that has no `final.json` yet."""
    todo = []
    for testbed in testbeds():
        settings = settings_for(testbed, out)
        for seed in seeds[testbed.name]:
            for arm in arms:
                config = run_config(settings, arm, seed)
                if not (Path(config["output_dir"]) / FINAL).is_file():
                    todo.append(config)
    return todo


def outcomes(out: Path, testbed: Testbed, arms: tuple[str, ...], seeds: tuple[int, ...]) -> dict[str, list[dict]]:
    """The finished runs of each arm on a testbed, in seed order (an arm with a seed missing is left out)."""
    runs = out / testbed.name / "runs"
    found = {}
    for arm in arms:
        finals = [json.loads(p.read_text()) for s in seeds if (p := runs / f"{arm}-seed{s}" / FINAL).is_file()]
        if len(finals) == len(seeds):
            found[arm] = finals
    return found


def success(finals: dict[str, list[dict]]) -> dict[str, list[float]]:
    return {arm: [f[HELDOUT_SUCCESS] for f in runs] for arm, runs in finals.items()}


# ---- the pilot and the power analysis ------------------------------------------------------------


def plan(pilot: Path, family: int | None = None) -> dict[str, Any]:
    """Per testbed, from the pilot's checks: G, the SESOI (G / 2), the planning SD (the largest SD of
    the paired differences among G and the ceilings: a remedy's comparison is no less noisy than its
    ceiling's) and the seeds for 80% power at the SESOI at alpha 0.05 / `family` (Holm's first step;
    by default every remedy on every testbed)."""
    family = family or len(testbeds()) * len(REMEDIES)
    table = {}
    for testbed in testbeds():
        checks = manipulation_checks(success(outcomes(pilot, testbed, CHECK_ARMS, pilot_seeds())))
        if checks.gap is None:
            continue
        sd = max([checks.gap.sd, *(test.sd for test in checks.ceilings.values())])
        row: dict[str, Any] = {"checks": checks.as_dict(), "planning_sd": sd, "sesoi": checks.sesoi}
        row["seeds"] = seeds_for_power(checks.sesoi, sd, alpha=ALPHA / family) if checks.sesoi > 0 else None
        table[testbed.name] = row
    return table


# ---- the analysis --------------------------------------------------------------------------------


def analyze(out: Path, docs: Path) -> Path:
    """The manipulation checks, the fidelity checks, the remedy tests with Holm over every remedy
    judged, the verdicts; results.md, results.json and runs.jsonl in `docs`."""
    seeds, smallest = confirmatory_seeds(), sesoi()
    if seeds is None or smallest is None:
        raise SystemExit("the confirmatory seeds and the SESOI are fixed by the pre-registration: run `plan` first")
    found = {t.name: outcomes(out, t, ARMS, seeds[t.name]) for t in testbeds()}
    checks = {t.name: manipulation_checks(success(found[t.name])) for t in testbeds()}
    raw = {
        (t.name, remedy): test
        for t in testbeds()
        for remedy, test in remedy_tests(success(found[t.name]), REMEDIES).items()
        if untestable_reason(remedy, checks[t.name], smallest[t.name]) is None
    }
    adjusted = dict(zip(raw, holm([test.p_value for test in raw.values()])))
    family = len(testbeds()) * len(REMEDIES)
    record: dict[str, Any] = {"seeds": seeds, "sesoi": smallest, "holm_family": len(raw), "testbeds": {}}
    lines = [
        "# Results: the remedy study (v2)",
        "",
        "Design, hypotheses and the verdict rule: [preregistration.md](preregistration.md). Outcome: held-out "
        "success on each testbed's population at the last step (4,000 episodes), paired by seed. Holm over "
        f"the {len(raw)} remedy tests judged. Generated by `python -m baselines.apps.remedy_study analyze`.",
    ]
    for testbed in testbeds():
        name, check = testbed.name, checks[testbed.name]
        fidelity = _fidelity(testbed, out, seeds[name], found[name])
        verdicts = remedy_verdicts(
            success(found[name]),
            REMEDIES,
            check,
            sesoi=smallest[name],
            adjusted={r: p for (t, r), p in adjusted.items() if t == name},
            family_size=family,
        )
        span = f"seeds {seeds[name][0]}-{seeds[name][-1]}"
        lines += ["", f"## {testbed.about}: {span}", "", *_check_table(check, found[name]), ""]
        lines += _fidelity_lines(fidelity)
        lines += ["", *_verdict_table(verdicts, smallest[name])]
        record["testbeds"][name] = {
            "gamma": testbed.gamma,
            "spread": testbed.spread,
            "checks": check.as_dict(),
            "fidelity": fidelity,
            "verdicts": {v.remedy: v.as_dict() for v in verdicts},
            "arms": {arm: mean_interval([f[HELDOUT_SUCCESS] for f in runs]) for arm, runs in found[name].items()},
        }
    docs.mkdir(parents=True, exist_ok=True)
    plot_effects(record, docs / "effects.png")
    lines += ["", "![effects](effects.png)"]
    (docs / "results.md").write_text("\n".join(lines) + "\n")
    (docs / "results.json").write_text(json.dumps(finite_or_null(record), indent=1, allow_nan=False) + "\n")
    write_record(out, docs / "runs.jsonl")
    return docs / "results.md"


SHORT = {"vs": "VS, uniform draw", "vs_prob": "VS, drawn by probability", "population": "Population Co-Training"}


def plot_effects(record: dict[str, Any], path: Path) -> Path:
    """A forest plot per testbed: G, its parts, the ceilings and each remedy, with the SESOI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(record["testbeds"])
    figure, axes = plt.subplots(count, 1, figsize=(9, 3.6 * count), sharex=True, squeeze=False)
    for axis, (name, testbed) in zip(axes[:, 0], record["testbeds"].items()):
        checks = testbed["checks"]
        rows = [
            ("G (positive control)", checks["positive_control"], "black"),
            ("G's sharpening part", checks["sharpening_part"], "grey"),
            ("G's family part", checks["family_part"], "grey"),
            *((f"ceiling: {arm}", test, "tab:blue") for arm, test in checks["ceilings"].items()),
            *(
                (f"{SHORT.get(remedy, remedy)}: {v['verdict']}", v["test"], "tab:red")
                for remedy, v in testbed["verdicts"].items()
            ),
        ]
        rows = [row for row in rows if row[1]]
        for y, (_, test, colour) in enumerate(reversed(rows)):
            low, high = test["difference"] - test["low"], test["high"] - test["difference"]
            axis.errorbar(test["difference"], y, xerr=[[low], [high]], fmt="o", color=colour, capsize=3)
        axis.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)], fontsize=9)
        axis.axvline(0, color="black", lw=0.8)
        axis.axvline(record["sesoi"][name], color="tab:green", ls="--", lw=1, label="smallest effect of interest")
        axis.set_title(f"{name}: gamma {testbed['gamma']:g}, spread {testbed['spread']:g}", fontsize=10)
        axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    axes[-1, 0].set_xlabel("held-out success, difference from single-simulator RL (95% CI, paired by seed)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _fidelity(testbed: Testbed, out: Path, seeds: tuple[int, ...], finals: dict[str, list[dict]]) -> dict[str, float]:
    values = vs_fidelity(settings_for(testbed, out), seeds).as_dict()
    values["pool_diversity"] = pool_diversity(finals.get("population", []))
    return values


def _check_table(checks: ManipulationChecks, finals: dict[str, list[dict]]) -> list[str]:
    rows = [("G: held-out-trained minus single (positive control)", checks.gap)]
    rows += [("sharpening part: unsharpened minus single", checks.sharpening)]
    rows += [("family part: held-out-trained minus unsharpened", checks.family)]
    rows += [(f"ceiling: {LABELS[arm]} minus single", test) for arm, test in checks.ceilings.items()]
    lines = [
        "| arm | held-out success (mean ± 95% CI) |",
        "|---|---|",
        *(f"| {LABELS[arm]} | {_interval([f[HELDOUT_SUCCESS] for f in runs])} |" for arm, runs in finals.items()),
        "",
        f"Manipulation checks (G {'confirmed' if checks.confirmed else '**not confirmed**'}):",
        "",
        "| check | difference [95% CI] | SD of paired differences |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {_signed(test)} | {test.sd:.3f} |" for name, test in rows if test is not None]
    return lines


def _fidelity_lines(fidelity: dict[str, float]) -> list[str]:
    return [
        f"Fidelity: Verbalized Sampling's replies are {fidelity['vs_to_unsharpened']:.3f} drawn uniformly and "
        f"{fidelity['vs_prob_to_unsharpened']:.3f} drawn by probability (mean per-state total variation over "
        f"{fidelity['states']} probe states, averaged over the seeds' families) from the unsharpened family's, the "
        f"sharpened family's {fidelity['sharpened_to_unsharpened']:.3f}; the unsharpened family is "
        f"{fidelity['unsharpened_to_target']:.3f} from the population. The population's pool members differ by "
        f"{fidelity['pool_diversity']:.3f} at the end of training (mean pairwise total variation)."
    ]


def _verdict_table(verdicts: list[Any], sesoi: float) -> list[str]:
    family = len(testbeds()) * len(REMEDIES)
    lines = [
        f"Smallest effect of interest (pre-registered): {sesoi:.3f}.",
        "",
        f"| remedy | minus single [95% CI] | Holm p | one-sided 95% upper bound | power at the SESOI (alpha "
        f"{ALPHA}/{family}) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        judged = v.verdict != NOT_TESTABLE
        shown = (f"{v.adjusted_p:.2g}", f"{v.upper_bound:+.3f}", f"{v.power:.2f}") if judged else ("-",) * 3
        held = f"**{v.verdict}**" + (" (harms)" if v.harms else "") + f": {v.reason}"
        lines.append(f"| {LABELS[v.remedy]} | {_signed(v.test)} | {' | '.join(shown)} | {held} |")
    beyond = [v for v in verdicts if v.verdict == NOT_TESTABLE and v.test is not None and v.test.low > 0]
    for v in beyond:
        lines += [
            "",
            f"Exploratory, not a verdict: the interval of {LABELS[v.remedy]} lies above 0 although its ceiling is "
            "below the smallest effect of interest.",
        ]
    return lines


def _interval(values: list[float]) -> str:
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f}"


def _signed(test: Any) -> str:
    return f"{test.difference:+.3f} [{test.low:+.3f}, {test.high:+.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.apps.remedy_study", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["pilot", "plan", "run", "analyze"])
    parser.add_argument("--out", type=Path, help=f"where the runs go ({OUT}; the pilot: {PILOT_OUT})")
    parser.add_argument("--docs", type=Path, default=DOCS, help=f"where results go ({DOCS})")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    pilot_out = args.out or PILOT_OUT
    if args.action == "plan":
        table = plan(pilot_out)
        args.docs.mkdir(parents=True, exist_ok=True)
        (args.docs / "pilot.json").write_text(json.dumps(finite_or_null(table), indent=1, allow_nan=False) + "\n")
        write_record(pilot_out, args.docs / "runs-pilot.jsonl")
        family = len(testbeds()) * len(REMEDIES)
        for name, row in table.items():
            print(
                f"{name}: G {row['checks']['positive_control']['difference']:+.3f}, SESOI {row['sesoi']:.3f}, "
                f"SD {row['planning_sd']:.3f}, seeds for power {POWER}, alpha {ALPHA}/{family}: {row['seeds']}"
            )
        return 0
    if args.action == "analyze":
        print(f"results: {analyze(args.out or OUT, args.docs)}")
        return 0
    if args.action == "pilot":
        out, arms, seeds = pilot_out, CHECK_ARMS, {t.name: pilot_seeds() for t in testbeds()}
    else:
        seeds = confirmatory_seeds()
        if seeds is None:
            raise SystemExit("the confirmatory seeds are fixed by the pre-registration: run `plan` first")
        out, arms = args.out or OUT, ARMS
    check_provenance(out, provenance())
    todo = plan_runs(out, arms, seeds)
    print(f"trained {run_configs(todo, BASE, jobs=args.jobs)} runs under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
