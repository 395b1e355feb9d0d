"""The v1 collapse study: the positive control's decision rule, Holm over the remedy tests, runs
that refuse to mix commits, and a record that reruns bit for bit (and a changed one that does not)."""

import json

import pytest

pytest.importorskip("scipy")
pytest.importorskip("torch")

from baselines.apps import study
from baselines.apps.demo import DemoSettings
from baselines.apps.study import Cell


def write_final(out, cell, arm, seed, success, commit="abc"):
    folder = out / cell.name / "runs" / f"{arm}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    final = {"heldout_success": success, "panel_success": success, "provenance": {"commit": commit, "clean": True}}
    (folder / study.FINAL).write_text(json.dumps(final))
    (folder / "run_config.json").write_text(json.dumps({"seed": seed, "steps": 2}))


def pilot(out, cell, gap, noise):
    for i, seed in enumerate(study.PILOT_SEEDS):
        write_final(out, cell, "single", seed, 0.5 + noise[i])
        write_final(out, cell, "heldout", seed, 0.5 + gap + noise[i] * 0.5)


def test_a_cell_qualifies_only_when_its_gap_reaches_the_minimum_detectable_effect(tmp_path):
    noise = [0.01, -0.02, 0.015, -0.005, 0.0]
    clear, faint = Cell(10.0, 0.5), Cell(3.0, 0.5)
    pilot(tmp_path, clear, 0.2, noise)
    pilot(tmp_path, faint, 0.005, noise)
    table = study.pilot_control(tmp_path)
    assert table[clear.name]["qualifies"] and not table[faint.name]["qualifies"]
    assert table[faint.name]["mde_at_confirmatory_seeds"] > table[faint.name]["difference"]
    assert set(table) == {clear.name, faint.name}, "cells without a complete pilot are not judged"


def test_remedy_tests_are_paired_by_seed_and_holm_corrected(tmp_path):
    cell = Cell(10.0, 0.5)
    for seed in study.SEEDS:
        family = 0.1 * (seed % 3)  # a per-seed family effect shared by every arm: pairing removes it
        write_final(tmp_path, cell, "single", seed, 0.4 + family)
        write_final(tmp_path, cell, "vs", seed, 0.5 + family + 0.001 * seed)
        write_final(tmp_path, cell, "population", seed, 0.4 + family + (0.01 if seed % 2 else -0.01))
    tests = {t.remedy: t for t in study.remedy_tests(tmp_path, [cell])}
    assert tests["vs"].verdict == "helps" and tests["population"].verdict == "no detectable effect"
    assert all(t.adjusted_p >= t.result.p_value for t in tests.values())


def test_runs_of_another_commit_or_an_uncommitted_tree_are_refused(tmp_path):
    write_final(tmp_path, Cell(1.0, 0.5), "single", 100, 0.5, commit="old")
    with pytest.raises(SystemExit, match="one commit"):
        study.check_provenance(tmp_path, {"commit": "new", "clean": True})
    with pytest.raises(SystemExit, match="committed tree"):
        study.check_provenance(tmp_path / "empty", {"commit": "new", "clean": False})
    study.check_provenance(tmp_path, {"commit": "old", "clean": True})
    write_final(tmp_path, Cell(3.0, 0.5), "single", 100, 0.5, commit="new")
    with pytest.raises(SystemExit, match="2 commits"):
        study.write_record(tmp_path, tmp_path / "runs.jsonl")


def test_recorded_runs_rerun_bit_for_bit_and_a_changed_record_is_caught(tmp_path):
    base = DemoSettings(steps=3, groups=2, group_size=2, eval_tasks=4, eval_samples=1, jobs=1)
    out = tmp_path / "out"
    todo = study.plan_runs(out, base, [Cell(3.0, 0.5)], ("single", "vs"), (0,))
    assert study.run_configs(todo, base, jobs=1, progress=False) == 2
    assert study.plan_runs(out, base, [Cell(3.0, 0.5)], ("single", "vs"), (0,)) == [], "finished runs are kept"
    record = tmp_path / "runs.jsonl"
    assert study.write_record(out, record) == 2
    assert study.verify(record, 2, here=True) == []
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    runs[0]["outcome"]["heldout_success"] += 1e-12  # a record kept from other code
    record.write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    differences = study.verify(record, 2, here=True)
    assert len(differences) == 1 and "heldout_success" in differences[0]


def test_verify_reruns_a_record_with_the_code_of_its_commit(tmp_path):
    """A record names its commit; `verify` checks that commit out and reruns there, so later code
    cannot hide a record that its own code does not reproduce (the recorded outcome is wrong here)."""
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        cwd=study.Path(study.__file__).resolve().parents[1],
    )
    if commit.returncode != 0:
        pytest.skip("not a git checkout")
    config = study.run_config(
        study.cell_settings(
            DemoSettings(steps=2, groups=2, group_size=2, eval_tasks=2, eval_samples=1), Cell(3.0, 0.5), tmp_path
        ),
        "single",
        0,
    )
    target = DemoSettings().target
    truth = study.rerun(config, target)
    entry = {
        "cell": "gamma3-spread0.5",
        "arm": "single",
        "seed": 0,
        "config": config,
        "target": target,
        "outcome": {**truth, "heldout_success": truth["heldout_success"] + 0.5},
        "provenance": {"commit": commit.stdout.strip(), "clean": True},
    }
    record = tmp_path / "runs.jsonl"
    record.write_text(json.dumps(entry) + "\n")
    differences = study.verify(record, 1)
    assert len(differences) == 1 and differences[0].startswith("gamma3-spread0.5 single seed 0: heldout_success")
