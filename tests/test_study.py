"""The pre-registered study's analysis on hand-built outcomes, and a tiny sweep that resumes."""

import json

import numpy as np
import pytest

pytest.importorskip("scipy")
pytest.importorskip("torch")

from baselines.demo import DemoSettings
from baselines.study import Cell, demo_cell, load_outcomes, planned_tests, run_sweep, write_results


def outcomes(shift: dict[Cell, dict[str, float]]) -> dict[Cell, dict[str, list[float]]]:
    noise = np.linspace(-0.01, 0.01, 10)
    return {
        cell: {method: (0.5 + shift.get(cell, {}).get(method, 0.0) + noise).tolist() for method in METHODS}
        for cell in CELLS
    }


CELLS = [Cell(g, s) for s in (1.0, 2.0) for g in (1.0, 3.0)]
METHODS = ("single", "vs", "population")


def test_the_planned_tests_their_families_and_verdicts():
    clear = Cell(3.0, 2.0)
    tests = planned_tests(outcomes({clear: {"vs": 0.1, "population": 0.05, "single": -0.05}}))
    confirmatory = [t for t in tests if t.confirmatory]
    exploratory = [t for t in tests if not t.confirmatory]
    # per spread: H1 and H2 at gamma 3, H3 (gamma 3 against gamma 1); gamma 1 remedies are exploratory
    assert sorted(t.hypothesis for t in confirmatory) == ["H1", "H1", "H2", "H2", "H3", "H3"]
    assert len(exploratory) == 4 and all("exploratory" in t.hypothesis for t in exploratory)
    verdicts = {(t.hypothesis, t.cell): t.verdict for t in confirmatory}
    assert verdicts[("H1", clear)] == "helps" and verdicts[("H2", clear)] == "helps"
    assert verdicts[("H3", clear)] == "hurts", "single at gamma 3 is below single at gamma 1"
    assert verdicts[("H1", Cell(3.0, 1.0))] == "no detectable effect"
    for test in tests:
        assert test.adjusted_p >= test.welch.p_value
    assert demo_cell(tests) == clear


def test_no_cell_is_chosen_for_the_demo_when_nothing_helps():
    assert demo_cell(planned_tests(outcomes({}))) is None


def test_a_tiny_sweep_resumes_and_is_analysed(tmp_path):
    base = DemoSettings(steps=2, groups=2, group_size=2, eval_tasks=4, eval_samples=1, jobs=1)
    cells = [Cell(3.0, 1.0)]
    assert run_sweep(tmp_path, base=base, cells=cells, seeds=2, jobs=1, progress=False) == 6
    assert run_sweep(tmp_path, base=base, cells=cells, seeds=2, jobs=1, progress=False) == 0, "finished runs are kept"
    found = load_outcomes(tmp_path, cells)
    assert {cell: {m: len(v) for m, v in by.items()} for cell, by in found.items()} == {
        cell: dict.fromkeys(METHODS, 2) for cell in cells
    }
    assert "Not tested" in write_results(tmp_path).read_text(), "a cell with 2 of 10 seeds is not tested"
    results = write_results(tmp_path, seeds=2)
    assert (tmp_path / "phase_diagram.png").is_file() and "Confirmatory tests" in results.read_text()
    assert json.loads((tmp_path / "results.json").read_text())["outcomes"].keys() == {c.name for c in cells}


def test_the_demo_report_states_the_regime_the_study_found(tmp_path):
    from baselines.demo import write_report

    settings = DemoSettings(out=str(tmp_path), methods=("single",))
    summary = {"single": dict.fromkeys(("heldout_success", "train_reward", "train_success", "entropy"), (0.5, 0.1))}
    report = write_report(settings, summary, (0.1, 0.01), [], 1.0).read_text()
    assert "no remedy beat single-simulator RL" in report and "Holm" in report
