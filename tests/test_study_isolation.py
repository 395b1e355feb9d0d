"""`study verify` reruns a record with its commit's code and nothing else, whatever the install, and when
a rerun differs it names what in the provenance differs between the record and the rerun.

The hostile case is the usual install (`pip install -e .`): its import finder resolves the project's
packages to the installed checkout, so a recorded commit that lacks a module the checkout has (here, one
from before `baselines/` was regrouped into `training/` and `apps/`) would run the checkout's code instead.
"""

import json
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from baselines.apps import provenance, study
from baselines.apps.demo import DemoSettings, run_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scope_envs", "sims", "baselines")
CELL = study.Cell(3.0, 0.5)

# The recorded commit's own outcomes: today's, and also the steps trained. Code from elsewhere lacks them.
RECORDED_OUTCOMES = """

_final_values = final_values


def final_values(history, tail, target=None):
    return {**_final_values(history, tail, target), "steps_trained": len(history)}
"""

# What the recorded commit ran to make its record.
RECORD_A_RUN = """
import json, sys
from baselines.demo import _train, final_values
config, target = json.loads(sys.stdin.read())
print(json.dumps(final_values(_train(config), 1, target)))
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def copy_project(repo: Path) -> None:
    """The project's files as they are in this checkout (a clean CI clone: its HEAD), ignored ones left out."""
    listed = git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "--", *PACKAGES, "pyproject.toml")
    for name in listed.splitlines():
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)


def before_the_regroup(repo: Path) -> None:
    """The demo at `baselines/demo.py`, with this commit's own outcomes, and no `baselines/apps`."""
    demo = (repo / "baselines" / "apps" / "demo.py").read_text()
    shutil.rmtree(repo / "baselines" / "apps")
    (repo / "baselines" / "demo.py").write_text(demo + RECORDED_OUTCOMES)


def tiny_config(out: Path) -> dict:
    settings = DemoSettings(steps=2, groups=2, group_size=2, eval_tasks=2, eval_samples=1)
    return run_config(study.cell_settings(settings, CELL, out), "single", 0)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A repository whose first commit made the record and whose HEAD cannot rerun it: HEAD is
    regrouped and its persuasion environment fails on import. Yields (repository, the record's run)."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("__pycache__/\n")
    copy_project(repo)
    before_the_regroup(repo)
    commit = commit_all(repo, "the recorded commit")
    config, target = tiny_config(tmp_path_factory.mktemp("runs")), DemoSettings().target
    made = subprocess.run(
        [sys.executable, "-c", RECORD_A_RUN],
        input=json.dumps([config, target]),
        capture_output=True,
        text=True,
        cwd=repo,
        check=True,
    )
    outcome = json.loads(made.stdout.strip().splitlines()[-1])
    assert outcome["steps_trained"] == 2

    (repo / "baselines" / "demo.py").unlink()
    copy_project(repo)
    init = repo / "scope_envs" / "persuasion_acts" / "__init__.py"
    init.write_text(init.read_text() + '\nraise ImportError("not the recorded commit\'s environment")\n')
    commit_all(repo, "regrouped, and a persuasion environment that no longer imports")
    run = {
        "cell": CELL.name,
        "arm": "single",
        "seed": 0,
        "config": config,
        "target": target,
        "outcome": outcome,
        "provenance": {"commit": commit, "clean": True},
    }
    yield repo, run


def verify(repo: Path, run: dict, record: Path) -> subprocess.CompletedProcess:
    """`verify` of a one-run record, with the repository's HEAD code and this interpreter (and its install)."""
    record.write_text(json.dumps(run) + "\n")
    command = ["-m", "baselines.apps.study", "verify", "--docs", str(record.parent), "--record", record.name]
    return subprocess.run([sys.executable, *command, "--sample", "1"], capture_output=True, text=True, cwd=repo)


def test_verify_reruns_with_the_recorded_commits_code_only(recorded, tmp_path):
    repo, run = recorded
    done = verify(repo, run, tmp_path / "runs.jsonl")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all identical" in done.stdout


def test_a_differing_rerun_names_the_provenance_entries_that_differ(recorded, tmp_path):
    """A record made on another kind of machine, whose outcome this one does not reproduce."""
    repo, run = recorded
    here = platform.machine()
    elsewhere = {"machine": "aarch64", "torch_cpu_capability": "SVE256"}
    if here == "aarch64":
        elsewhere = {"machine": "x86_64", "torch_cpu_capability": "AVX2"}
    changed = {
        **run,
        "outcome": {**run["outcome"], "heldout_success": run["outcome"]["heldout_success"] + 0.5},
        "provenance": {**run["provenance"], "platform": elsewhere},
    }
    done = verify(repo, changed, tmp_path / "runs.jsonl")
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("DIFFERS")]
    assert "heldout_success" in line
    assert f"machine {elsewhere['machine']} (recorded) vs {here} (here)" in line
    assert re.search(rf"torch CPU capability {elsewhere['torch_cpu_capability']} \(recorded\) vs \w+ \(here\)", line)
    assert "torch intra-op threads not recorded" in line


def test_provenance_names_the_platform_a_result_depends_on():
    platform = provenance.provenance()["platform"]
    assert set(platform) == set(provenance.PLATFORM_LABELS)
    assert platform["machine"]


def test_provenance_differences_are_named_and_missing_entries_are_not_recorded():
    recorded = {"commit": "a", "python": "3.11.7", "versions": {"torch": "2.12.0"}}
    here = {**recorded, "versions": {"torch": "2.13.0"}, "platform": {"torch_threads": 1}}
    assert provenance.provenance_differences(recorded, here) == [
        "torch 2.12.0 (recorded) vs 2.13.0 (here)",
        "torch intra-op threads not recorded (1 here)",
    ]
    assert provenance.provenance_differences(here, here) == []


def test_a_record_without_a_clean_commit_is_not_rerun_at_one(tmp_path):
    """No commit holds the code of a run made from a changed tree, or of one that names no commit: `verify`
    says so instead of rerunning this checkout's code under the record's name."""
    with pytest.raises(ValueError, match="no commit to rerun at"):
        provenance.run_at_commit(None, "reply = 1", {})
    for record in ({"commit": None, "clean": True}, {"commit": "abc", "clean": False}, {"commit": "abc"}):
        with pytest.raises(SystemExit, match="cannot be rerun at a commit"):
            provenance.recorded_commit(record, "a run")
    assert provenance.recorded_commit({"commit": "abc", "clean": True}, "a run") == "abc"
    run = {"cell": CELL.name, "arm": "single", "seed": 0, "config": {}, "outcome": {}}
    (tmp_path / "runs.jsonl").write_text(json.dumps({**run, "provenance": {"commit": None, "clean": True}}) + "\n")
    with pytest.raises(SystemExit, match="cannot be rerun at a commit"):
        study.verify(tmp_path / "runs.jsonl", 1)


def test_a_change_to_any_of_the_project_s_packages_makes_a_tree_unclean(tmp_path):
    """The root module (scope_verifiers.py) counts as much as a package folder."""
    repo = tmp_path / "repo"
    for name in provenance.PROJECT_PACKAGES:
        path = repo / name / "__init__.py" if (ROOT / name).is_dir() else repo / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "packages"], cwd=repo, check=True)
    assert provenance.provenance(repo)["clean"]
    for name in provenance.project_paths(repo):
        path = repo / name / "__init__.py" if (repo / name).is_dir() else repo / name
        path.write_text("changed = True\n")
        assert not provenance.provenance(repo)["clean"], name
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)
        shutil.rmtree(repo / name) if (repo / name).is_dir() else (repo / name).unlink()
        assert not provenance.provenance(repo)["clean"], f"{name} deleted"
        subprocess.run(["git", "checkout", "-q", "--", "."], cwd=repo, check=True)


def test_which_data_settings_were_set_is_recorded_and_named_when_it_differs(monkeypatch):
    monkeypatch.setenv("SCOPE_EXAMPLE_DATA", "/anywhere")
    monkeypatch.delenv("SCOPE_OTHER_DATA", raising=False)
    made = provenance.provenance()
    assert made["data"]["SCOPE_EXAMPLE_DATA"] == "set" and "/anywhere" not in json.dumps(made)
    unset = {**made, "data": {k: v for k, v in made["data"].items() if k != "SCOPE_EXAMPLE_DATA"}}
    assert provenance.provenance_differences(made, unset) == ["$SCOPE_EXAMPLE_DATA set (recorded) vs unset (here)"]
    older = {key: value for key, value in made.items() if key != "data"}
    assert "$SCOPE_EXAMPLE_DATA not recorded (set here)" in provenance.provenance_differences(older, made)
