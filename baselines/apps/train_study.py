"""A pre-registered study of training runs: each arm (a training config with overrides) at each seed,
trained by `scope train` in a child process with portable kernels (`baselines.training.portable`).

    python -m baselines.apps.train_study run DESIGN [--jobs 2]   # every run; a stopped sweep resumes
    python -m baselines.apps.train_study analyze DESIGN          # keeps the runs in the docs, then the analysis
    python -m baselines.apps.train_study verify DESIGN [--sample 2] [--steps 2] [--initial] [--here]

A design is a YAML file in a benchmark's `train_studies/` folder (or a path): `title`, `out` (the runs
folder), `docs` (where the kept runs and results go), `arms` (name: {config, overrides}), `overrides`
(every arm's), `seeds` ([first, stop)) and `analysis`, the benchmark's module that reduces a run to
what ships (`keep(run, target)`) and analyses kept runs (`main([*runs, "--out", docs])`).

Each seed's evaluation before training (`scope eval` of a folder with no checkpoint) runs once, with
the first arm's config, and goes to every arm's run folder as `initial.json`: the arms of a design
differ in what they train on, not in how they are evaluated. Every run folder, the evaluations before
training included, records what made it in `provenance.json` (the commit, the library versions, the
kernels, which data settings were set); a sweep refuses an uncommitted tree (`--uncommitted` tries one
out in an empty folder only), a folder whose runs come from another commit, a checkout that changes
while it runs, and a run folder another process holds. `verify` reruns the first `--steps` steps of
sampled kept runs with the code of the commit each names, in a temporary git worktree, and compares
every metric but the machine's (time, throughput, disk) bit for bit (with `--initial`, the evaluation
before training too, with the settings and at the commit that made it: `analyze` keeps what made it
beside each run as `initial_provenance.json`, once it checked those are the settings the design asks for).
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from baselines.apps.provenance import (
    provenance,
    provenance_differences,
    recorded_commit,
    refuse_mixed_commits,
    run_at_commit,
)
from baselines.training.checkpoints import read_metrics
from baselines.training.portable import portable_environment
from baselines.training.rollouts import HELDOUT_SUCCESS
from scope_envs.core.files import atomic_write

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = "provenance.json"
INITIAL = "initial.json"
INITIAL_PROVENANCE = "initial_provenance.json"  # beside a kept run: what made its seed's evaluation before training
METRICS = "metrics.jsonl"
LOCK = ".lock"
# Measures of the machine, not of the run: time, throughput, and the run folder's size on disk.
MACHINE_MEASURES = ("step_time", "generated_tokens_per_s", "disk_mb")


@dataclass(frozen=True)
class Design:
    title: str
    out: Path
    docs: Path
    arms: dict[str, dict[str, Any]]
    overrides: tuple[str, ...]
    seeds: tuple[int, ...]
    analysis: str

    @classmethod
    def load(cls, name: str | Path) -> Design:
        from baselines.training.config import find_config

        with find_config(name, kind="train_studies").open() as file:
            values = yaml.safe_load(file)
        first, stop = values["seeds"]
        return cls(
            title=values["title"],
            out=Path(values["out"]),
            docs=Path(values["docs"]),
            arms={arm: {"overrides": [], **spec} for arm, spec in values["arms"].items()},
            overrides=tuple(values.get("overrides", ())),
            seeds=tuple(range(first, stop)),
            analysis=values["analysis"],
        )

    def settings(self, arm: str, seed: int) -> list[str]:
        """`scope train`'s (or `scope eval`'s) config and overrides for one run, but its output folder."""
        spec = self.arms[arm]
        return [spec["config"], *self.overrides, *spec["overrides"], f"seed={seed}"]

    def arguments(self, arm: str, seed: int, output_dir: Path) -> list[str]:
        return [*self.settings(arm, seed), f"output_dir={output_dir}"]

    @property
    def evaluating_arm(self) -> str:
        """The arm whose config evaluates each seed before training, for every arm."""
        return next(iter(self.arms))

    def config(self, arm: str, seed: int) -> Any:
        """The training config of one run, as `scope train` reads its settings."""
        from baselines.training.config import load_config

        config, *overrides = self.settings(arm, seed)
        return load_config(config, overrides)

    def steps(self, arm: str) -> int:
        return self.config(arm, self.seeds[0]).steps

    def run_folder(self, arm: str, seed: int) -> Path:
        return self.out / f"{arm}-seed{seed}"

    def initial_folder(self, seed: int) -> Path:
        return self.out / f"initial-seed{seed}"

    def runs(self) -> list[tuple[str, int]]:
        return [(arm, seed) for seed in self.seeds for arm in self.arms]


def steps_done(folder: Path) -> int:
    return max((record.get("step", 0) for record in read_metrics(folder / METRICS)), default=0)


def run_provenance() -> dict[str, Any]:
    """What a run is made from: this checkout's commit and cleanliness, and the libraries and kernels
    of a child with the training children's environment (the portable kernels)."""
    made = provenance()
    program = "import json, torch; from baselines.apps.provenance import *; print(json.dumps(environment(LIBRARIES)))"
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=portable_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    return {**made, **json.loads(done.stdout)}


def check_provenance(design: Design, made: dict[str, Any], *, uncommitted: bool = False) -> None:
    """Refuses to mix: every run already under the design's folder comes from this commit, clean. An
    uncommitted try-out starts an empty folder only: no commit holds its code, so nothing may resume it."""
    folders = sorted(design.out.glob(f"*/{PROVENANCE}"))
    if uncommitted:
        if folders:
            raise SystemExit(
                f"{design.out} holds runs already: an uncommitted try-out starts an empty folder (its code is "
                "in no commit, so no sweep may resume or add to it); move it away, or commit and run"
            )
        return
    recorded = [(path, json.loads(path.read_text())) for path in folders]
    refuse_mixed_commits(made, recorded, f"run it from a worktree of that commit, or move {design.out} away")


def check_unchanged(made: dict[str, Any]) -> None:
    """Before each child: the checkout still holds the commit (and, committed, no changes) the sweep
    recorded, so every run names the code that made it."""
    now = provenance()
    if now["commit"] != made["commit"] or (made["clean"] and not now["clean"]):
        raise RuntimeError(
            f"the checkout changed during the sweep (commit {now['commit']}, clean {now['clean']}; the sweep "
            f"started at {made['commit']}, clean {made['clean']}): restore it and run again to resume"
        )


@contextmanager
def claimed(folder: Path) -> Iterator[int]:
    """A lock on a run folder for as long as its child lives (the child inherits it): a second sweep,
    or one started while an orphaned child still trains, is refused rather than writing beside it. A
    local filesystem's `flock`: NFS emulates it with locks a child does not inherit."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            message = f"{folder} is in use by another process (a sweep, or a child of a stopped one)"
            raise RuntimeError(message) from None
        yield handle
    finally:
        os.close(handle)


_children: set[subprocess.Popen] = set()
_children_lock = threading.Lock()
_stopping = threading.Event()  # set by a stopping sweep: no child starts after it


def _child(command: list[str], log: Path, lock: int) -> tuple[int, str]:
    """`scope COMMAND` in portable kernels, holding the run folder's lock: its exit code and output."""
    with log.open("a") as output:
        with _children_lock:
            if _stopping.is_set():
                raise RuntimeError("the sweep is stopping: no run starts")
            child = subprocess.Popen(
                [sys.executable, "-m", "baselines.cli", *command],
                cwd=ROOT,
                env=portable_environment(),
                stdout=subprocess.PIPE,
                stderr=output,
                text=True,
                pass_fds=(lock,),
            )
            _children.add(child)
        try:
            printed, _ = child.communicate()
        finally:
            with _children_lock:
                _children.discard(child)
    return child.returncode, printed


def _stop_children() -> None:
    """A sweep that stops stops its children, and starts none after: a run resumes from its last
    checkpoint when it runs again."""
    with _children_lock:
        _stopping.set()
        running = list(_children)
    for child in running:
        child.terminate()
    for child in running:
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()


def evaluate_initial(design: Design, seed: int, made: dict[str, Any]) -> Path:
    """A seed's evaluation before training, with the evaluating arm's config, and what made it."""
    folder = design.initial_folder(seed)
    target = folder / INITIAL
    if target.is_file():
        return target
    with claimed(folder) as lock:
        if target.is_file():  # another sweep made it while this one waited
            return target
        check_unchanged(made)
        command = ["eval", *design.arguments(design.evaluating_arm, seed, folder)]
        code, printed = _child(command, folder / "eval.log", lock)
        if code != 0:
            raise RuntimeError(f"the evaluation before training of seed {seed} failed: see {folder / 'eval.log'}")
        evaluated = {
            "arm": design.evaluating_arm,
            "seed": seed,
            "settings": design.settings(design.evaluating_arm, seed),
        }
        atomic_write(folder / PROVENANCE, json.dumps({**made, "evaluated": evaluated}, indent=1, sort_keys=True) + "\n")
        atomic_write(target, json.dumps(json.loads(printed.strip().splitlines()[-1])) + "\n")
    return target


def train(design: Design, arm: str, seed: int, made: dict[str, Any]) -> Path:
    folder = design.run_folder(arm, seed)
    with claimed(folder) as lock:
        if steps_done(folder) >= design.steps(arm):
            return folder
        if (folder / PROVENANCE).is_file():
            differing = provenance_differences(json.loads((folder / PROVENANCE).read_text()), made)
            if differing:
                raise RuntimeError(
                    f"{folder.name} was started elsewhere ({'; '.join(differing)}): resuming it here would mix "
                    "two environments in one run; resume it where it started, or move it away"
                )
        else:
            atomic_write(folder / PROVENANCE, json.dumps(made, indent=1, sort_keys=True) + "\n")
        check_unchanged(made)
        command = ["train", *design.arguments(arm, seed, folder), "--resume"]
        if _child(command, folder / "train.log", lock)[0] != 0:
            raise RuntimeError(f"{folder.name} failed: see {folder / 'train.log'}")
    return folder


def run(design: Design, *, jobs: int = 2, uncommitted: bool = False, progress: bool = True) -> list[Path]:
    """Every run of the design not finished yet, `jobs` at a time, then each seed's step 0 beside its runs."""
    from tqdm.auto import tqdm

    made = run_provenance()
    check_provenance(design, made, uncommitted=uncommitted)
    _stopping.clear()
    steps = {arm: design.steps(arm) for arm in design.arms}
    total = sum(steps[arm] for arm, _ in design.runs())

    def done_steps() -> int:
        return sum(min(steps_done(design.run_folder(arm, seed)), steps[arm]) for arm, seed in design.runs())

    with (
        ThreadPoolExecutor(max_workers=jobs) as pool,
        tqdm(total=total, initial=done_steps(), desc=design.title[:40], unit="step", disable=not progress) as bar,
    ):
        pending: set[Future] = {pool.submit(evaluate_initial, design, seed, made) for seed in design.seeds}
        pending |= {pool.submit(train, design, arm, seed, made) for arm, seed in design.runs()}
        try:
            while pending:
                finished, pending = wait(pending, timeout=30, return_when=FIRST_COMPLETED)
                for future in finished:
                    future.result()
                bar.n = done_steps()  # a resumed run goes back to its checkpoint: the count may fall
                bar.refresh()
        except BaseException:
            for future in pending:
                future.cancel()
            _stop_children()
            raise
    folders = []
    for arm, seed in design.runs():
        folder = design.run_folder(arm, seed)
        shutil.copyfile(design.initial_folder(seed) / INITIAL, folder / INITIAL)
        folders.append(folder)
    return folders


def analyze(design: Design) -> Path:
    """Keeps each finished run in the docs (the analysis' `keep`, plus its provenance and its seed's
    evaluation before training's), then analyses them. Every run is checked before any is kept, so a
    refusal leaves the docs as they were."""
    analysis = importlib.import_module(design.analysis)
    for arm, seed in design.runs():
        folder = design.run_folder(arm, seed)
        if steps_done(folder) < design.steps(arm) or not (folder / INITIAL).is_file():
            raise SystemExit(f"{folder} is not finished: `run` first")
    initial = {seed: initial_provenance(design, seed) for seed in design.seeds}
    for arm, seed in design.runs():
        check_trained_as_designed(design, arm, seed)
    kept = []
    for arm, seed in design.runs():
        folder = design.run_folder(arm, seed)
        target = analysis.keep(folder, design.docs / folder.name)
        shutil.copyfile(folder / PROVENANCE, target / PROVENANCE)
        atomic_write(target / INITIAL_PROVENANCE, json.dumps(initial[seed], indent=1, sort_keys=True) + "\n")
        kept.append(target)
    analysis.main([*map(str, kept), "--out", str(design.docs)])
    return design.docs


def design_differences(design: Design, arm: str, seed: int, recorded: dict[str, Any]) -> list[str]:
    """The settings in which a recorded config, a run's or an evaluation's, differs from what the
    design asks for at (arm, seed): those that change what a step computes (`resume_changes`), and
    the number of steps (a run trained longer would be kept as if it were the design's)."""
    from baselines.training.config import resume_changes

    wanted = design.config(arm, seed)
    changes = resume_changes(recorded, wanted)
    if recorded.get("steps") != wanted.steps:
        changes["steps"] = (recorded.get("steps"), wanted.steps)
    return [f"{key} {old!r} (the design: {new!r})" for key, (old, new) in changes.items()]


def _not_the_design(what: str, differences: list[str], design: Design) -> SystemExit:
    return SystemExit(
        f"{what} was made with other settings than the design asks for ({'; '.join(differences)}): a study's runs "
        f"and their step 0 come from one design; analyze at the commit that made them, or move {design.out} away "
        "and run the whole sweep again"
    )


def check_trained_as_designed(design: Design, arm: str, seed: int) -> None:
    """A finished run was trained with the design's settings, as its saved config records them."""
    from baselines.training.run import Run

    folder = design.run_folder(arm, seed)
    recorded = Run(folder, design.config(arm, seed)).recorded_config()
    if recorded is None:
        raise SystemExit(f"{folder} records no config (no config.yaml, no readable checkpoint): `run` it again")
    differences = design_differences(design, arm, seed, recorded)
    if differences:
        raise _not_the_design(str(folder), differences, design)


def initial_provenance(design: Design, seed: int) -> dict[str, Any]:
    """What made a seed's evaluation before training, refused where it records no settings or other
    settings than the design asks for (a design edited after it): its step 0 would not be the runs'.
    The settings name configs, read as this checkout has them; an edit inside a config file since is
    caught on the evaluating arm's runs, whose saved configs are compared and whose commit is the
    evaluation's (a sweep refuses to mix commits)."""
    from baselines.training.config import load_config, saved_values

    path = design.initial_folder(seed) / PROVENANCE
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    settings = recorded.get("evaluated", {}).get("settings")
    if not settings:
        raise SystemExit(
            f"nothing records the settings of seed {seed}'s evaluation before training ({path} is missing or "
            f"was made before such records): move {path.parent} away and `run` again to evaluate it"
        )
    try:
        made_with = saved_values(load_config(settings[0], settings[1:]))
    except ValueError as error:  # a key or a config renamed since, a value no longer valid
        raise SystemExit(
            f"seed {seed}'s evaluation before training ({path}) records settings this checkout cannot read "
            f"({error}): analyze at the commit that made it, or move {design.out} away and run the whole sweep again"
        ) from None
    differences = design_differences(design, design.evaluating_arm, seed, made_with)
    if differences:
        raise _not_the_design(f"seed {seed}'s evaluation before training ({path})", differences, design)
    return recorded


# What a rerun at the recorded commit runs: one `scope` command; its reply is what the command printed.
RERUN_A_COMMAND = """
import contextlib, io
from baselines.cli import main
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    code = main(request["command"])
if code:
    sys.exit(f"scope {request['command'][0]} exited {code}")
reply = printed.getvalue()
"""


def rerun(commit: str | None, command: list[str], *, here: bool = False) -> tuple[str, dict[str, Any]]:
    """`scope COMMAND` with the code of `commit` (`here`: this checkout's), in portable kernels: its
    standard output and the environment it ran in."""
    return run_at_commit(commit, RERUN_A_COMMAND, {"command": command}, here=here)


def without_machine_measures(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in MACHINE_MEASURES}


def _evaluates(key: str) -> bool:
    return key == HELDOUT_SUCCESS or key.startswith(f"{HELDOUT_SUCCESS}/")


def _same(recorded: Any, again: Any) -> bool:
    """Bit for bit, where a NaN is the same NaN (JSON keeps no payload)."""
    if isinstance(recorded, float) and isinstance(again, float) and math.isnan(recorded) and math.isnan(again):
        return True
    return type(recorded) is type(again) and recorded == again


def record_differences(label: str, recorded: dict[str, Any], again: dict[str, Any]) -> list[str]:
    """Every entry of either record that the other lacks or holds another value for."""
    missing = object()
    return [
        f"{label}: {key} {again.get(key, 'absent')!r} != recorded {recorded.get(key, 'absent')!r}"
        for key in dict.fromkeys([*recorded, *again])
        if not _same(recorded.get(key, missing), again.get(key, missing))
    ]


def verify_run(kept: Path, steps: int, *, initial: bool = False, here: bool = False) -> list[str]:
    """Reruns a kept run's first `steps` steps (and with `initial`, its seed's evaluation before
    training, its step 0, with the settings and at the commit that made it) and lists what differs."""
    recorded = json.loads((kept / PROVENANCE).read_text())
    commit = None if here else recorded_commit(recorded, str(kept))
    if initial:  # checked before any rerun: a run kept without it fails at once, not after its steps
        path = kept / INITIAL_PROVENANCE
        if not path.is_file():
            raise SystemExit(
                f"{kept} has no {INITIAL_PROVENANCE} (kept by an older analyze, which did not keep it): `analyze` again"
            )
        evaluated = json.loads(path.read_text())
        initial_commit = None if here else recorded_commit(evaluated, f"{kept.name}'s evaluation before training")
    checkout = provenance()["commit"] if here else None  # with --here, the code that ran is this checkout's

    def explained(lines: list[str], record: dict[str, Any], rerun_made: dict[str, Any], at: str | None) -> list[str]:
        if not lines:
            return []
        beside = "; ".join(provenance_differences(record, {**rerun_made, "commit": at or checkout}))
        return [f"{kept.name} {line} (provenance differing: {beside or 'none'})" for line in lines]

    differences = []
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "run"
        command = ["train", str((kept / "config.yaml").resolve()), f"steps={steps}", f"output_dir={output}"]
        _, made = rerun(commit, command, here=here)
        again = [without_machine_measures(record) for record in read_metrics(output / METRICS)]
        whole = [without_machine_measures(record) for record in read_metrics(kept / METRICS)]
        before = [record for record in whole if record.get("step", 0) <= steps]
        if again and whole and steps < whole[-1].get("step", 0):
            # a run evaluates after its last step: the shortened rerun's last record holds an evaluation
            # the recorded run made later, and only that is set aside
            shortened = before[len(again) - 1] if len(before) >= len(again) else {}
            again[-1] = {key: value for key, value in again[-1].items() if key in shortened or not _evaluates(key)}
        found = []
        for old, new in zip(before, again, strict=False):
            found += record_differences(f"step {old.get('step')}", old, new)
        if len(before) != len(again):
            found.append(f"{len(again)} metric records in the rerun, {len(before)} recorded")
        differences += explained(found, recorded, made, commit)
        if initial:
            command = ["eval", *evaluated["evaluated"]["settings"], f"output_dir={Path(scratch) / 'initial'}"]
            printed, made = rerun(initial_commit, command, here=here)
            value = json.loads(printed.splitlines()[-1])
            found = record_differences("evaluation before training", json.loads((kept / INITIAL).read_text()), value)
            differences += explained(found, evaluated, made, initial_commit)
    return differences


def verify(
    design: Design, *, sample: int, steps: int, initial: bool = False, here: bool = False, seed: int = 0
) -> list[str]:
    """Reruns `sample` kept runs, drawn with `seed`, and lists what differs."""
    if sample < 1 or steps < 1:
        raise SystemExit("verify reruns at least one step of at least one kept run: --sample and --steps of 1 or more")
    kept = sorted(folder.parent for folder in design.docs.glob(f"*/{PROVENANCE}"))
    if not kept:
        raise SystemExit(f"no kept runs in {design.docs}: `analyze` first")
    chosen = np.random.default_rng(seed).choice(len(kept), size=min(sample, len(kept)), replace=False)
    differences = []
    for index in sorted(chosen):
        started = time.perf_counter()
        found = verify_run(kept[index], steps, initial=initial, here=here)
        differences += found
        state = "identical" if not found else f"{len(found)} differences"
        print(f"reran {kept[index].name}: {state} ({time.perf_counter() - started:.0f} s)", flush=True)
    return differences


def stop_on_sigterm() -> None:
    """A sweep sent SIGTERM (`kill`, a job scheduler) stops as on Ctrl-C, its children with it, rather
    than dying alone and leaving them to train on as orphans that hold their folders' locks."""
    signal.signal(signal.SIGTERM, lambda number, _: sys.exit(128 + number))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.apps.train_study", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["run", "analyze", "verify"])
    parser.add_argument("design", help="a design in a benchmark's train_studies/ folder, or a YAML path")
    parser.add_argument("--jobs", type=int, default=2, help="run: runs trained at once")
    parser.add_argument(
        "--uncommitted", action="store_true", help="run: from a tree with uncommitted changes (to try it out)"
    )
    parser.add_argument("--sample", type=int, default=2, help="verify: kept runs to rerun")
    parser.add_argument("--steps", type=int, default=2, help="verify: steps of each to rerun")
    parser.add_argument("--sample-seed", type=int, default=0, help="verify: the seed that draws the kept runs")
    parser.add_argument("--initial", action="store_true", help="verify: rerun the evaluation before training too")
    parser.add_argument("--here", action="store_true", help="verify with this checkout's code, not the recorded commit")
    args = parser.parse_args(argv)
    design = Design.load(args.design)
    if args.action == "run":
        stop_on_sigterm()
        folders = run(design, jobs=args.jobs, uncommitted=args.uncommitted)
        print(f"{len(folders)} runs finished under {design.out}")
    elif args.action == "analyze":
        print(f"results: {analyze(design)}")
    else:
        differences = verify(
            design, sample=args.sample, steps=args.steps, initial=args.initial, here=args.here, seed=args.sample_seed
        )
        for line in differences:
            print(f"DIFFERS: {line}")
        print("all identical" if not differences else "differences found")
        return 1 if differences else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
