"""The remedy study's documents state what its pilot, its design and its analysis produced."""

import json
import math
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs/study/v2"
PILOT = json.loads((STUDY / "pilot.json").read_text())
DESIGN = yaml.safe_load((ROOT / "scope_envs/persuasion_acts/remedy_studies/remedies_v2.yaml").read_text())


def prose(path: Path) -> str:
    return " ".join(path.read_text().split())


def signed(row: dict) -> str:
    return f"{row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"


@pytest.mark.parametrize("testbed", ["v1", "mechanism"])
def test_the_preregistered_seeds_and_smallest_effects_are_the_pilots(testbed):
    row = PILOT[testbed]
    text = prose(STUDY / "preregistration.md")
    assert DESIGN["sesoi"][testbed] == round(row["sesoi"], 3)
    first, stop = DESIGN["confirmatory_seeds"][testbed]
    assert first == 0 and stop == 5 * math.ceil(1.5 * row["seeds"] / 5), "the power analysis's seeds, plus half"
    gap = row["checks"]["positive_control"]
    expected = (
        f"| {testbed} | {signed(gap)} | {row['sesoi']:.3f} | {row['planning_sd']:.3f} | {row['seeds']} | "
        f"**{stop} (seeds 0-{stop - 1})** |"
    )
    assert expected in text
    checks = row["checks"]
    assert f"sharpening part {checks['sharpening_part']['difference']:+.3f}" in text
    assert f"family part {checks['family_part']['difference']:+.3f}" in text


def test_the_pilot_record_holds_every_check_arm_at_every_pilot_seed():
    runs = [json.loads(line) for line in (STUDY / "runs-pilot.jsonl").read_text().splitlines()]
    seeds = range(*DESIGN["pilot_seeds"])
    arms = {"single", "heldout", "unsharpened", "diverse"}
    assert {(r["cell"], r["arm"], r["seed"]) for r in runs} == {
        (t["name"], arm, seed) for t in DESIGN["testbeds"] for arm in arms for seed in seeds
    }
    assert len({r["provenance"]["commit"] for r in runs}) == 1 and all(r["provenance"]["clean"] for r in runs)


def test_the_results_are_the_analysis_of_the_recorded_runs():
    """Recomputed from runs.jsonl alone (the same code as `analyze`): every check and every verdict."""
    pytest.importorskip("scipy")
    from baselines.apps.verdicts import manipulation_checks, remedy_tests, remedy_verdicts, untestable_reason
    from scope_envs.core.stats import holm

    results = json.loads((STUDY / "results.json").read_text())
    runs = [json.loads(line) for line in (STUDY / "runs.jsonl").read_text().splitlines()]
    outcomes: dict[str, dict[str, list[float]]] = {}
    for run in sorted(runs, key=lambda r: r["seed"]):
        outcomes.setdefault(run["cell"], {}).setdefault(run["arm"], []).append(run["outcome"]["heldout_success"])
    assert len({r["provenance"]["commit"] for r in runs}) == 1 and all(r["provenance"]["clean"] for r in runs)
    remedies = ("vs", "vs_prob", "population")
    checks = {name: manipulation_checks(arms) for name, arms in outcomes.items()}
    judged = {
        (name, remedy): test
        for name, arms in outcomes.items()
        for remedy, test in remedy_tests(arms, remedies).items()
        if untestable_reason(remedy, checks[name], DESIGN["sesoi"][name]) is None
    }
    adjusted = dict(zip(judged, holm([t.p_value for t in judged.values()])))
    for name, arms in outcomes.items():
        first, stop = DESIGN["confirmatory_seeds"][name]
        assert all(len(values) == stop - first for values in arms.values())
        recorded = results["testbeds"][name]
        assert checks[name].as_dict()["positive_control"] == pytest.approx(recorded["checks"]["positive_control"])
        verdicts = remedy_verdicts(
            arms,
            remedies,
            checks[name],
            sesoi=DESIGN["sesoi"][name],
            adjusted={r: p for (t, r), p in adjusted.items() if t == name},
            family_size=len(remedies) * len(outcomes),
        )
        for verdict in verdicts:
            assert verdict.verdict == recorded["verdicts"][verdict.remedy]["verdict"], (name, verdict.remedy)
            assert verdict.test.difference == pytest.approx(recorded["verdicts"][verdict.remedy]["test"]["difference"])
