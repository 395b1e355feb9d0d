"""A pre-registered study of training runs (`baselines.apps.train_study`) runs every arm at every seed in
portable kernels, keeps them with their provenance, and `verify` reruns kept runs bit for bit and names
what differs. The design is the exploitation study's, with a tiny random model and two steps."""

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from baselines.apps import train_study
from baselines.apps.train_study import INITIAL_PROVENANCE, MACHINE_MEASURES, PROVENANCE, Design

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
        initial = json.loads((folder / INITIAL_PROVENANCE).read_text())
        assert initial == json.loads((kept.out / f"initial-seed{seed}" / PROVENANCE).read_text())
    # two seeds, two steps: the report is interim and says so, with no verdict
    report = (kept.docs / "results.md").read_text()
    assert "**No verdict: " in report and "exploit-seed0: last evaluation at step 2, not 100" in report


def test_verify_reruns_kept_runs_bit_for_bit_and_names_a_changed_metric(kept, tmp_path):
    assert train_study.verify(kept, sample=2, steps=2, initial=True, here=True) == []
    shutil.copytree(kept.docs / "exploit-seed0", tmp_path / "exploit-seed0")
    metrics = tmp_path / "exploit-seed0" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    records[1]["loss"] = records[1]["loss"] + 1e-12  # one last bit, as another CPU's kernels would
    records[0]["step_time"] = 1e9  # a machine measure: never compared
    metrics.write_text("".join(json.dumps(record) + "\n" for record in records))
    found = train_study.verify_run(tmp_path / "exploit-seed0", 2, here=True)
    assert len(found) == 1 and "step 2: loss" in found[0]
    assert "step_time" in MACHINE_MEASURES


def test_a_sweep_refuses_an_uncommitted_tree_and_runs_of_another_commit(tmp_path):
    design = Design.load(tiny_design(tmp_path))
    with pytest.raises(SystemExit, match="committed tree"):
        train_study.check_provenance(design, {"commit": "abc", "clean": False})
    (design.out / "exploit-seed0").mkdir(parents=True)
    (design.out / "exploit-seed0" / PROVENANCE).write_text(json.dumps({"commit": "old", "clean": True}))
    with pytest.raises(SystemExit, match="one commit"):
        train_study.check_provenance(design, {"commit": "new", "clean": True})
    train_study.check_provenance(design, {"commit": "old", "clean": True})


def test_runs_of_a_changed_tree_are_neither_resumed_nor_added_to(tmp_path):
    """A run made from uncommitted changes names a commit that lacks its code: a committed sweep of the
    same commit refuses its folder, and an uncommitted try-out starts an empty folder only."""
    design = Design.load(tiny_design(tmp_path))
    train_study.check_provenance(design, {"commit": "abc", "clean": False}, uncommitted=True)
    (design.out / "exploit-seed0").mkdir(parents=True)
    (design.out / "exploit-seed0" / PROVENANCE).write_text(json.dumps({"commit": "abc", "clean": False}))
    with pytest.raises(SystemExit, match="uncommitted changes"):
        train_study.check_provenance(design, {"commit": "abc", "clean": True})
    with pytest.raises(SystemExit, match="empty folder"):
        train_study.check_provenance(design, {"commit": "abc", "clean": False}, uncommitted=True)


def test_a_checkout_that_changes_during_a_sweep_stops_it(kept):
    made = json.loads((kept.out / "exploit-seed0" / PROVENANCE).read_text())
    train_study.check_unchanged(made)
    with pytest.raises(RuntimeError, match="changed during the sweep"):
        train_study.check_unchanged({**made, "commit": "0" * 40})


def test_a_run_folder_another_process_holds_is_refused(kept):
    """A second sweep, or one started while a stopped sweep's child still trains, must not write beside it."""
    made = json.loads((kept.out / "exploit-seed0" / PROVENANCE).read_text())
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_LOCK, str(kept.out / "exploit-seed0" / train_study.LOCK)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match="in use by another process"):
            train_study.train(kept, "exploit", 0, made)
    finally:
        holder.kill()
        holder.wait()
    assert train_study.train(kept, "exploit", 0, made) == kept.out / "exploit-seed0"  # finished: nothing to run


HOLD_A_LOCK = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_a_run_started_in_another_environment_is_not_resumed_in_this_one(tmp_path):
    """Its record would name one environment for steps made in two."""
    design = Design.load(tiny_design(tmp_path))
    folder = design.run_folder("exploit", 0)
    folder.mkdir(parents=True)
    started = {"commit": "abc", "clean": True, "python": "3.11.7", "data": {"SCOPE_P4G_DATA": "set"}}
    (folder / PROVENANCE).write_text(json.dumps(started))
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    with pytest.raises(RuntimeError, match=r"started elsewhere \(\$SCOPE_P4G_DATA set \(recorded\) vs unset"):
        train_study.train(design, "exploit", 0, {**started, "data": {}})


def test_a_stopping_sweep_starts_no_run(tmp_path):
    train_study._stop_children()
    try:
        with pytest.raises(RuntimeError, match="stopping"):
            train_study._child(["envs"], tmp_path / "log", 0)
    finally:
        train_study._stopping.clear()


def test_each_seed_s_evaluation_before_training_records_what_made_it(kept):
    for seed in kept.seeds:
        made = json.loads((kept.out / f"initial-seed{seed}" / PROVENANCE).read_text())
        evaluated = {"arm": kept.evaluating_arm, "seed": seed, "settings": kept.settings(kept.evaluating_arm, seed)}
        assert made["evaluated"] == evaluated and made["commit"]


def test_a_torn_metrics_line_does_not_stop_a_sweep_counting_steps(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"st')
    assert train_study.steps_done(tmp_path) == 2


def test_verify_compares_every_entry_of_both_records(kept, tmp_path):
    """An entry the record lacks is a difference too; a NaN is the same NaN."""
    kept_run = tmp_path / "exploit-seed0"
    shutil.copytree(kept.docs / "exploit-seed0", kept_run)
    records = [json.loads(line) for line in (kept_run / "metrics.jsonl").read_text().splitlines()]
    del records[0]["loss"]
    (kept_run / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    [found] = train_study.verify_run(kept_run, 2, here=True)
    assert "step 1: loss" in found and "recorded 'absent'" in found
    # a rerun shorter than the run evaluates after its last step, as the run did later: not a difference,
    # but any other entry it has and the record lacks at that step is
    assert train_study.verify_run(kept.docs / "exploit-seed0", 1, here=True) == []
    [found] = train_study.verify_run(kept_run, 1, here=True)
    assert "step 1: loss" in found and "recorded 'absent'" in found
    nan = float("nan")
    assert train_study.record_differences("x", {"a": nan, "b": 1}, {"a": nan, "b": 1}) == []
    assert train_study.record_differences("x", {"b": 1}, {"b": 1.0}) == ["x: b 1.0 != recorded 1"]
    with pytest.raises(SystemExit, match="at least one"):
        train_study.verify(kept, sample=0, steps=1)


def test_a_kept_run_of_a_changed_tree_is_not_rerun_at_its_commit(kept, tmp_path):
    kept_run = tmp_path / "exploit-seed0"
    shutil.copytree(kept.docs / "exploit-seed0", kept_run)
    made = json.loads((kept_run / PROVENANCE).read_text())
    (kept_run / PROVENANCE).write_text(json.dumps({**made, "clean": False}))
    with pytest.raises(SystemExit, match="cannot be rerun at a commit"):
        train_study.verify_run(kept_run, 1)


def _clean() -> bool:
    from baselines.apps.provenance import provenance

    return provenance()["clean"]


@pytest.mark.skipif(not _clean(), reason="a rerun at the recorded commit needs this checkout's code committed")
def test_verify_reruns_at_the_recorded_commit_in_a_worktree(kept):
    assert train_study.verify(kept, sample=1, steps=1) == []


def test_verify_reruns_the_evaluation_before_training_with_the_settings_that_made_it(kept, tmp_path):
    """Not with the design's settings of today: the kept record of what made it says how to rerun it."""
    shutil.copytree(kept.docs / "exploit-seed0", tmp_path / "exploit-seed0")
    path = tmp_path / "exploit-seed0" / INITIAL_PROVENANCE
    recorded = json.loads(path.read_text())
    recorded["evaluated"]["settings"].append("no_such_setting=1")  # made otherwise than the design says
    path.write_text(json.dumps(recorded))
    with pytest.raises(RuntimeError, match="no_such_setting"):
        train_study.verify(dataclasses.replace(kept, docs=tmp_path), sample=1, steps=1, initial=True, here=True)


def test_analyze_refuses_an_evaluation_before_training_made_otherwise_than_the_design_asks(kept, tmp_path):
    """Its numbers would stand as step 0 of runs it was not made for (a design edited after it)."""
    moved = dataclasses.replace(kept, out=tmp_path / "runs", docs=tmp_path / "docs")
    shutil.copytree(kept.out, moved.out)
    path = moved.initial_folder(0) / PROVENANCE
    recorded = json.loads(path.read_text())
    recorded["evaluated"]["settings"] = [
        s.replace("eval_tasks=2", "eval_tasks=1") for s in recorded["evaluated"]["settings"]
    ]
    path.write_text(json.dumps(recorded))
    with pytest.raises(SystemExit, match=r"seed 0's evaluation before training .* \(eval_tasks 1 \(the design: 2\)\)"):
        train_study.analyze(moved)
    path.unlink()
    with pytest.raises(SystemExit, match="nothing records the settings of seed 0's evaluation before training"):
        train_study.analyze(moved)
    assert not moved.docs.exists()


def test_analyze_refuses_a_run_trained_otherwise_than_the_design_asks_and_keeps_none(kept, tmp_path):
    """A finished run is not trained again: a design edited after it would pair it with another step 0.
    The refusal comes before any run is kept, so the docs are as they were."""
    moved = dataclasses.replace(kept, out=tmp_path / "runs", docs=tmp_path / "docs")
    shutil.copytree(kept.out, moved.out)
    last = moved.run_folder(*moved.runs()[-1])  # the last run the analysis reaches
    (last / "config.yaml").write_text((last / "config.yaml").read_text().replace("lr: 2.0e-05", "lr: 3.0e-05"))
    with pytest.raises(
        SystemExit, match=rf"{last.name} was made with other settings .*\(lr 3e-05 \(the design: 2e-05\)\)"
    ):
        train_study.analyze(moved)
    assert not moved.docs.exists()


def test_verify_initial_refuses_a_run_kept_without_its_step_zero_record_before_rerunning_anything(
    kept, tmp_path, monkeypatch
):
    shutil.copytree(kept.docs / "exploit-seed0", tmp_path / "exploit-seed0")
    (tmp_path / "exploit-seed0" / INITIAL_PROVENANCE).unlink()

    def rerun(*args, **kwargs):
        raise AssertionError("a rerun started before the kept run's records were checked")

    monkeypatch.setattr(train_study, "rerun", rerun)
    with pytest.raises(SystemExit, match=r"no initial_provenance\.json .* `analyze` again"):
        train_study.verify_run(tmp_path / "exploit-seed0", 2, initial=True, here=True)


def test_analyze_of_a_sweep_not_run_yet_says_run_first(tmp_path):
    design = Design.load(tiny_design(tmp_path))
    with pytest.raises(SystemExit, match="is not finished: `run` first"):
        train_study.analyze(design)


def test_analyze_refuses_a_run_trained_longer_than_the_design_asks(kept, tmp_path):
    """`steps` may change on a resume, so a resume's comparison leaves it out; a kept run may not."""
    moved = dataclasses.replace(kept, out=tmp_path / "runs", docs=tmp_path / "docs")
    shutil.copytree(kept.out, moved.out)
    config = moved.run_folder("exploit", 0) / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2\n", "steps: 3\n"))
    with pytest.raises(SystemExit, match=r"exploit-seed0 was made with other settings .*\(steps 3 \(the design: 2\)\)"):
        train_study.analyze(moved)


def test_analyze_refuses_a_step_zero_record_this_checkout_cannot_read(kept, tmp_path):
    moved = dataclasses.replace(kept, out=tmp_path / "runs", docs=tmp_path / "docs")
    shutil.copytree(kept.out, moved.out)
    path = moved.initial_folder(0) / PROVENANCE
    recorded = json.loads(path.read_text())
    recorded["evaluated"]["settings"].append("a_key_renamed_since=1")
    path.write_text(json.dumps(recorded))
    with pytest.raises(SystemExit, match=r"records settings this checkout cannot read .*a_key_renamed_since"):
        train_study.analyze(moved)


def test_a_sweep_sent_sigterm_stops_its_children(tmp_path):
    """As on Ctrl-C: a child left training would hold its folder's lock and write on after the sweep."""
    import os
    import signal
    import time

    design = tiny_design(tmp_path)
    spec = yaml.safe_load(design.read_text())
    spec["overrides"] = [*spec["overrides"], "steps=200"]  # long enough to be stopped in the middle
    design.write_text(yaml.safe_dump(spec))
    sweep = subprocess.Popen(
        [sys.executable, "-m", "baselines.apps.train_study", "run", str(design), "--uncommitted", "--jobs", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tasks = Path(f"/proc/{sweep.pid}/task")  # a run's child is started by one of the sweep's threads
    try:
        deadline = time.monotonic() + 300
        children: list[int] = []
        while not children and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.5)
            found = [pid for task in tasks.glob("*/children") for pid in _read(task).split()]
            children = [int(pid) for pid in found if b"baselines.cli\x00train" in _command_line(int(pid))]
        assert children, "the sweep started no training run"
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=120) != 0
        # the sweep waits for its children before it exits: none is left at that moment (a sweep that
        # died alone leaves its child mid-step, to train on until it next writes to the closed pipe)
        alive = [pid for pid in children if _command_line(pid)]
        assert not alive, f"children {alive} train on after their sweep stopped"
    finally:
        for pid in (sweep.pid, *children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sweep.wait()


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # a thread that ended while the test looked
        return ""
