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
    readme = prose("README.md")
    gap = follow_up["positive_control"]
    assert follow_up["confirmed"] and follow_up["cell"] == "gamma10-spread1" and follow_up["seeds"] == 20
    assert f"G = {signed(gap)}" in readme and f"| {signed(gap)} | (p = {gap['p_value']:.2g}) |" in demo_doc
    tests = {t["remedy"]: t for t in follow_up["tests"]}
    assert f"Verbalized Sampling {signed(tests['vs'])}" in readme
    assert f"Population Co-Training {signed(tests['population'])}" in readme
    for remedy, label in (("vs", "Verbalized Sampling"), ("population", "Population Co-Training")):
        test = tests[remedy]
        share = f"{test['difference'] / gap['difference']:+.0%}"
        assert f"| {label} | {signed(test)} | {test['holm_p']:.2g} | {share} |" in demo_doc
        assert test["verdict"] == "no detectable effect"
    assert "neither remedy" in readme and "neither remedy" in demo_doc


def test_the_shipped_demo_report_agrees_with_its_summary():
    report = (ROOT / "docs/demo/report.md").read_text()
    summary = json.loads((ROOT / "docs/demo/summary.json").read_text())
    control = summary["positive_control"]
    assert f"**{control['difference']:+.3f} [{control['low']:+.3f}, {control['high']:+.3f}]**" in report
    assert ("does not hold" in report) == (not control["holds"])
    for method, values in summary["summary"].items():
        mean, half = values["heldout_success"]
        assert re.search(rf"\| [^|]+ \| {mean:.3f} ± {half:.3f} \|", report), method


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
    control, remedies = summary["positive_control"], summary["remedies"]
    readme, demo_doc = prose("README.md"), prose("docs/demo.md")
    assert f"G = {signed(control)}, MDE {control['mde']:.3f}" in readme
    assert f"G = {signed(control)} against an MDE of {control['mde']:.3f}" in demo_doc
    assert ("control holds" in readme) == control["holds"]
    # five seeds of one cell, uncorrected: the README states the control and the study's verdicts, no demo effect
    assert signed(remedies["vs"]) not in readme and "ahead of single-simulator RL" not in readme
    seconds = re.search(r"; (\d+) s on \d+ processes", (ROOT / "docs/demo/report.md").read_text())[1]
    assert f"in {seconds} s on two CPU cores" in readme  # the time stated is the shipped run's
    assert f"Sampling {signed(remedies['vs'])} (p = {remedies['vs']['p_value']:.2g}, uncorrected)" in demo_doc
    assert f"Population Co-Training {signed(remedies['population'])}" in demo_doc
    assert f"G = +{CONTROL['gamma3-spread1']['difference']:.3f} at seeds 100-104" in demo_doc
