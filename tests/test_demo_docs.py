"""The numbers the README and docs/demo.md state about the demo and the v1 study are the ones the
study's analysis and a real demo run produced, and a fresh demo run reproduces the shipped report."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "docs/study/v1/results.json").read_text())
CONTROL = RESULTS["positive_control"]
# The first record (AVX2 kernels, kept beside the rerun): the follow-up was pre-registered from its pilot.
FIRST_CONTROL = json.loads((ROOT / "docs/study/v1/avx2/results.json").read_text())["positive_control"]


def prose(path: str) -> str:
    """A doc's text with its line wrapping undone."""
    return " ".join((ROOT / path).read_text().split())


def test_the_stated_gaps_and_mdes_are_the_studys():
    demo_doc = prose("docs/demo.md")
    gaps = {name: row["difference"] for name, row in CONTROL.items()}
    assert max(FIRST_CONTROL, key=lambda name: FIRST_CONTROL[name]["difference"]) == "gamma10-spread1"
    assert f"+{gaps['gamma1-spread0.5']:.3f} (gamma 1, spread 0.5)" in demo_doc
    assert f"+{gaps['gamma3-spread1']:.2f} and +{gaps['gamma10-spread1']:.2f}" in demo_doc
    assert f"(+{gaps['gamma3-spread1']:.3f} against +{gaps['gamma10-spread1']:.3f}, both" in demo_doc
    mdes = [row["mde_at_confirmatory_seeds"] for row in CONTROL.values()]
    assert f"({min(mdes):.2f}-{max(mdes):.2f} after the correction" in demo_doc
    pytest.importorskip("scipy")
    from baselines.apps.stats import minimum_detectable_effect

    pilot = FIRST_CONTROL["gamma10-spread1"]
    planned = prose("docs/study/v1/followup_preregistration.md")
    assert f"G = +{pilot['difference']:.3f} (SD of paired differences {pilot['sd']:.3f}" in planned
    assert f"detects {minimum_detectable_effect(pilot['sd'], 20, alpha=0.05 / 2):.3f} at 20 seeds" in planned
    qualifying = RESULTS["qualifying_cells"]
    assert ("no remedy was tested there" in demo_doc) == (not qualifying)


def signed(row):
    return f"{row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"


def test_the_stated_follow_up_is_the_studys():
    follow_up = RESULTS["follow_up"]
    demo_doc = prose("docs/demo.md")
    gap = follow_up["positive_control"]
    assert follow_up["confirmed"] and follow_up["cell"] == "gamma10-spread1" and follow_up["seeds"] == 20
    assert f"| {signed(gap)} | (p = {gap['p_value']:.2g}) |" in demo_doc
    tests = {t["remedy"]: t for t in follow_up["tests"]}
    for remedy, label in (("vs", "Verbalized Sampling"), ("population", "Population Co-Training")):
        test = tests[remedy]
        share = f"{test['difference'] / gap['difference']:+.0%}"
        assert f"| {label} | {signed(test)} | {test['holm_p']:.2g} | {share} |" in demo_doc
        assert test["verdict"] == "no detectable effect"
    assert "neither remedy had a detectable effect" in demo_doc


V2 = json.loads((ROOT / "docs/study/v2/results.json").read_text())
VERDICT_WORDS = {"vs": "Verbalized Sampling, uniform draw", "vs_prob": "Verbalized Sampling, drawn by probability"}


@pytest.mark.parametrize("testbed", ["v1", "mechanism"])
def test_the_stated_remedy_verdicts_are_the_remedy_studys(testbed):
    """docs/demo.md's table, and the README's and the study's summaries, state each verdict as found."""
    record = V2["testbeds"][testbed]
    demo_doc, readme, summary = prose("docs/demo.md"), prose("README.md"), prose("docs/study/v2/README.md")
    gap = signed(record["checks"]["positive_control"])
    assert f"{gap} |" in demo_doc and f"G = {gap}" in readme
    for remedy, verdict in record["verdicts"].items():
        label = VERDICT_WORDS.get(remedy, "Population Co-Training")
        assert f"| {label} | {signed(verdict['test'])} | {verdict['verdict']} |" in demo_doc
        assert signed(verdict["test"]) in summary or verdict["verdict"] == "not testable here"
    ceiling = record["checks"]["ceilings"]["unsharpened"]["difference"]
    if testbed == "v1":
        assert record["verdicts"]["vs"]["verdict"] == "not testable here"
        assert f"its ceiling, +{ceiling:.3f}, is below the smallest effect of interest" in readme
        population = record["verdicts"]["population"]
        assert f"Population Co-Training is **inconclusive** ({signed(population['test'])})" in readme
        assert f"power {population['power']:.2f}" in summary and f"(power {population['power']:.2f} at" in demo_doc
    else:
        for remedy, words in (("population", "Population Co-Training helps"), ("vs", "is negligible")):
            assert words in readme and signed(record["verdicts"][remedy]["test"]) in readme
        fidelity = record["fidelity"]
        assert f"total variation {fidelity['vs_to_unsharpened']:.2f}) than the sharpened family's" in demo_doc
        assert f"({fidelity['sharpened_to_unsharpened']:.2f})" in demo_doc


def test_the_shipped_demo_report_agrees_with_its_summary():
    report = (ROOT / "docs/demo/report.md").read_text()
    summary = json.loads((ROOT / "docs/demo/summary.json").read_text())
    checks = summary["checks"]
    assert f"| {signed(checks['positive_control'])} |" in report
    assert f"| {signed(checks['sharpening_part'])} |" in report and f"| {signed(checks['family_part'])} |" in report
    for method, values in summary["summary"].items():
        mean, half = values["heldout_success"]
        assert re.search(rf"\| [^|]+ \| {mean:.3f} ± {half:.3f} \|", report), method
    for verdict in summary["verdicts"].values():
        assert f"| {signed(verdict['test'])} |" in report and f"| {verdict['verdict']}: " in report


@pytest.mark.slow
def test_a_fresh_demo_run_reproduces_the_shipped_report(tmp_path):
    """`scope demo` with its defaults (about 90 s on 2 cores), compared with docs/demo/."""
    pytest.importorskip("torch")
    out = tmp_path / "demo"
    subprocess.run([sys.executable, "-m", "baselines.cli", "demo", "--out", str(out)], check=True, cwd=ROOT)
    fresh = json.loads((out / "summary.json").read_text())
    assert fresh == json.loads((ROOT / "docs/demo/summary.json").read_text())

    def tables(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("|") or line.startswith("G =")]

    assert tables((out / "report.md").read_text()) == tables((ROOT / "docs/demo/report.md").read_text())


def test_the_stated_demo_result_is_the_shipped_runs():
    summary = json.loads((ROOT / "docs/demo/summary.json").read_text())
    checks, verdicts = summary["checks"], summary["verdicts"]
    readme, demo_doc = prose("README.md"), prose("docs/demo.md")
    gap, sharpening, family = (checks[k] for k in ("positive_control", "sharpening_part", "family_part"))
    assert f"defaults G = {signed(gap)} (sharpening part {sharpening['difference']:+.3f}, family part" in readme
    assert f"family part {family['difference']:+.3f};" in readme
    assert f"G = {signed(gap)}, sharpening part {signed(sharpening)}, family part {signed(family)}" in demo_doc
    assert f"at five seeds it calls Verbalized Sampling {verdicts['vs']['verdict']} and" in readme
    population = verdicts["population"]
    assert f"Population Co-Training {population['verdict']}" in readme
    assert f"Population Co-Training is {population['verdict']} ({signed(population['test'])})" in demo_doc
    seconds = re.search(r"; (\d+) s on \d+ processes", (ROOT / "docs/demo/report.md").read_text())[1]
    assert f"in {seconds} s on two CPU cores" in readme  # the time stated is the shipped run's
    assert f"the report's own count, {seconds} s" in demo_doc
