"""A pre-registered study of training runs (`baselines.apps.train_study`) runs every arm at every seed in
portable kernels, keeps them with their provenance, and `verify` reruns kept runs bit for bit and names
what differs. The design is the exploitation study's, with a tiny random model and two steps."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from baselines.apps import train_study
from baselines.apps.train_study import MACHINE_MEASURES, PROVENANCE, Design

ROOT = Path(__file__).resolve().parents[1]
TINY = ["policy=tiny", "max_new_tokens=8", "steps=2", "eval_every=2", "eval_tasks=2", "group_size=2"]


def tiny_design(folder: Path) -> Path:
    shipped = yaml.safe_load((ROOT / "scope_envs/p4g/train_studies/exploit_text_v1.yaml").read_text())
    design = {
        **shipped,
        "out": str(folder / "runs"),
        "docs": str(folder / "docs"),
        "seeds": [0, 1],
        "overrides": [*shipped["overrides"], *TINY, "checkpoint_every=1"],
    }
    path = folder / "design.yaml"
    path.write_text(yaml.safe_dump(design))
    return path


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("study")
    design = Design.load(tiny_design(folder))
    train_study.run(design, jobs=2, uncommitted=True, progress=False)
    train_study.analyze(design)
    return design


def test_every_arm_runs_its_steps_with_the_seed_s_step_zero_and_portable_kernels(kept):
    for arm, seed in kept.runs():
        folder = kept.docs / f"{arm}-seed{seed}"
        steps = [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2]
        assert json.loads((folder / "initial.json").read_text()) == json.loads(
            (kept.out / f"initial-seed{seed}" / "initial.json").read_text()
        )
        made = json.loads((folder / PROVENANCE).read_text())
        assert made["platform"]["mkl_cbwr"] == "COMPATIBLE" and made["platform"]["torch_cpu_capability"] == "DEFAULT"
        assert made["platform"]["torch_threads"] == 1 and made["commit"]
    # two seeds, two steps: the report is interim and says so, with no verdict
    report = (kept.docs / "results.md").read_text()
    assert "**No verdict: " in report and "exploit-seed0: last evaluation at step 2, not 100" in report


def test_verify_reruns_kept_runs_bit_for_bit_and_names_a_changed_metric(kept):
    assert train_study.verify(kept, sample=2, steps=2, initial=True, here=True) == []
    metrics = kept.docs / "exploit-seed0" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    records[1]["loss"] = records[1]["loss"] + 1e-12  # one last bit, as another CPU's kernels would
    records[0]["step_time"] = 1e9  # a machine measure: never compared
    metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    found = train_study.verify_run(kept.docs / "exploit-seed0", 2, here=True)
    assert len(found) == 1 and "step 2: loss" in found[0]
    assert "step_time" in MACHINE_MEASURES


def test_a_sweep_refuses_an_uncommitted_tree_and_runs_of_another_commit(tmp_path):
    design = Design.load(tiny_design(tmp_path))
    with pytest.raises(SystemExit, match="committed tree"):
        train_study.check_provenance(design, {"commit": "abc", "clean": False})
    (design.out / "exploit-seed0").mkdir(parents=True)
    (design.out / "exploit-seed0" / PROVENANCE).write_text(json.dumps({"commit": "old"}))
    with pytest.raises(SystemExit, match="one commit"):
        train_study.check_provenance(design, {"commit": "new", "clean": True})
    train_study.check_provenance(design, {"commit": "old", "clean": True})


def _clean() -> bool:
    changes = subprocess.run(
        ["git", "status", "--porcelain", "--", "scope_envs", "sims", "baselines"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return changes.returncode == 0 and changes.stdout == ""


@pytest.mark.skipif(not _clean(), reason="a rerun at the recorded commit needs this checkout's code committed")
def test_verify_reruns_at_the_recorded_commit_in_a_worktree(kept):
    assert train_study.verify(kept, sample=1, steps=1) == []
