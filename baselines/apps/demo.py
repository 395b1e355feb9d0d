"""`scope demo`: simulator collapse and its remedies on a fast act-level benchmark, on a CPU.

The study (a shipped config, `collapse_v1` by default: the env, the agent's policy, and templates
of the training simulator's, the held-out target's and the panel's specs) trains an agent with
each method, several seeds each, through the same trainer as the language-model runs:

* `single`: against one simulator family sharpened by `gamma` (an aligned LLM simulator);
* `heldout`: the positive control, trained on the held-out target itself (what a perfect remedy
  would reach);
* `vs`: against the training simulator through Verbalized Sampling with `k` candidates;
* `cotrain`: the simulator starts as that family and is trained too, adversarially;
* `population`: co-training whose groups are played by the live simulator or a pool snapshot.

Every run is evaluated on the held-out target (the fitted population; in the v0 study, a panel of
families) on test scenarios, and on a panel of other families (between-family transfer). The
report first gives the positive control: the gap `G` between `heldout` and `single`, and the
minimum detectable effect (MDE) at the seeds run. Only where `G` is clear of zero and at least the
MDE does it state each remedy's effect (paired by seed, with its interval and its share of `G`);
elsewhere it says that this run cannot show a remedy working or failing.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

PROVENANCE = "kernels.json"  # what the runs computed with, beside summary.json (which holds only results)
STUDY = "collapse_v1"  # the shipped study of that name (`scope_envs/<benchmark>/studies/collapse_v1.yaml`)

METHODS = ("single", "heldout", "vs", "cotrain", "population")
DEFAULT_METHODS = ("single", "heldout", "vs", "population")
REMEDIES = ("vs", "cotrain", "population")
LABELS = {
    "single": "single simulator",
    "vs": "Verbalized Sampling",
    "cotrain": "Co-Training",
    "population": "Population Co-Training",
    "heldout": "trained on the held-out target (positive control)",
}
# Two-sided 97.5% quantiles of Student's t for 1..30 degrees of freedom (then the normal's).
T_975 = tuple(
    float(value)
    for value in "12.706 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 "
    "2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042".split()
)


@dataclass(frozen=True)
class DemoSettings:
    gamma: float = 3.0
    k: int = 5
    pool_size: int = 10
    pool_every: int = 16
    seeds: int = 5
    steps: int = 200
    groups: int = 16
    group_size: int = 8
    lr: float = 0.05
    simulator_lr: float = 0.05
    simulator_kl: float = 0.1
    spread: float = 1.0
    train_family: int = 0
    panel: int = 4
    eval_every: int = 20
    eval_tasks: int = 100
    eval_samples: int = 4
    methods: tuple[str, ...] = DEFAULT_METHODS
    jobs: int = 2
    out: str = "runs/demo"
    study: str = STUDY

    def study_config(self) -> dict[str, Any]:
        from baselines.training.config import find_config

        with find_config(self.study, kind="studies").open() as file:  # read from the file, a YAML error names it
            return yaml.safe_load(file)

    def _spec(self, template: str, seed: int, **extra: Any) -> str:
        family = self.study_config().get("train_family_first", self.train_family - seed) + seed
        return template.format(gamma=self.gamma, spread=self.spread, train_family=family, **extra)

    def train_spec(self, seed: int) -> str:
        """The training simulator of a seed: the study's family for it (`train_family_first + seed`),
        or `train_family` for every seed where the study names none."""
        return self._spec(self.study_config()["train_simulator"], seed)

    def panel_specs(self, seed: int) -> list[str]:
        """The between-family panel of a seed (its own members where the study has a target)."""
        study = self.study_config()
        first = study["panel_first"] + (seed * self.panel if "target" in study else 0)
        return [self._spec(study["panel_simulator"], seed, member=first + i) for i in range(self.panel)]

    @property
    def target(self) -> str | None:
        """The held-out target's spec (the fitted population), or None: the panel is the target."""
        return self.study_config().get("target")


def run_config(settings: DemoSettings, method: str, seed: int) -> dict[str, Any]:
    """The trainer config (as `scope train` key=values) of one method and seed."""
    study = settings.study_config()
    train_spec, panel = settings.train_spec(seed), settings.panel_specs(seed)
    config: dict[str, Any] = {
        "env": study["env"],
        "policy": study["policy"],
        "method": "single",
        "simulators": [train_spec],
        "eval_simulators": ([settings.target] if settings.target else []) + panel,
        "steps": settings.steps,
        "groups_per_step": settings.groups,
        "group_size": settings.group_size,
        "lr": settings.lr,
        "micro_batch": settings.groups * settings.group_size,
        "eval_every": settings.eval_every,
        "eval_tasks": settings.eval_tasks,
        "eval_samples": settings.eval_samples,
        "checkpoint_every": settings.steps,
        "keep_checkpoints": 1,
        "tensorboard": False,
        "seed": seed,
        "output_dir": str(Path(settings.out) / "runs" / f"{method}-seed{seed}"),
    }
    if method == "vs":
        config.update(method="vs", vs_k=settings.k)
    elif method in ("cotrain", "population"):
        config.update(
            method=method,
            simulator_policy=train_spec,
            simulator_lr=settings.simulator_lr,
            simulator_kl_coef=settings.simulator_kl,
            simulator_reward="adversarial",
        )
        if method == "population":
            config.update(pool_size=settings.pool_size, pool_every=settings.pool_every)
    elif method == "heldout":
        config.update(method="ensemble", simulators=[settings.target] if settings.target else panel)
    return config


_STEPS_DONE: Any = None  # a shared counter of training steps, set in each worker


def _init_worker(counter: Any) -> None:
    global _STEPS_DONE
    _STEPS_DONE = counter


def _worker_kernels() -> dict[str, Any]:
    """The kernels a training worker computes with (`baselines.training.portable`)."""
    import torch

    from baselines.training.portable import kernels_in_use

    torch.set_num_threads(1)
    return kernels_in_use()


def _train(config: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    from baselines.training.config import TrainConfig
    from baselines.training.trainer import Trainer

    def tick(_: dict[str, Any]) -> None:
        if _STEPS_DONE is not None:
            with _STEPS_DONE.get_lock():
                _STEPS_DONE.value += 1

    return Trainer(TrainConfig(**config).validate()).run(progress=False, on_step=tick, overwrite=True)


def run_all(
    settings: DemoSettings, *, progress: bool = True
) -> tuple[dict[str, list[list[dict[str, Any]]]], tuple[float, float]]:
    """Every method x seed, `settings.jobs` at a time, in processes that compute the same on any
    CPU (`baselines.training.portable`): the metric histories per method, and the untrained agent's
    held-out success."""
    from tqdm.auto import tqdm

    from baselines.training.portable import portable_pool

    # Co-training runs take the longest (a second learner): started first, they leave no
    # process idle at the end.
    longest_first = sorted(settings.methods, key=lambda m: m not in ("cotrain", "population"))
    jobs = [(method, seed) for method in longest_first for seed in range(settings.seeds)]
    counter = multiprocessing.get_context("spawn").Value("i", 0)
    bar = tqdm(total=len(jobs) * settings.steps, desc="demo", unit="step", disable=not progress)
    done = threading.Event()

    def follow() -> None:
        while not done.wait(0.25):
            bar.n = counter.value
            bar.refresh()

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    try:
        with portable_pool(settings.jobs, initializer=_init_worker, initargs=(counter,)) as pool:
            futures = {job: pool.submit(_train, run_config(settings, *job)) for job in jobs}
            untrained = pool.submit(untrained_success, settings)
            kernels = pool.submit(_worker_kernels)
            histories = {job: future.result() for job, future in futures.items()}
            baseline = untrained.result()
        (Path(settings.out) / PROVENANCE).write_text(json.dumps(kernels.result(), indent=1))
    finally:
        done.set()
        watcher.join()
        bar.n = counter.value
        bar.close()
    return {
        method: [histories[(method, seed)] for seed in range(settings.seeds)] for method in settings.methods
    }, baseline


# ---- summaries -------------------------------------------------------------------------------------


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% t-interval."""
    array = np.asarray(values, float)
    if len(array) < 2:
        return float(array.mean()), float("nan")
    t = T_975[len(array) - 2] if len(array) - 1 <= len(T_975) else 1.96
    return float(array.mean()), float(t * array.std(ddof=1) / math.sqrt(len(array)))


def heldout_key(target: str | None) -> str:
    """The metric of the held-out target: the target simulator's success, else the panel's mean."""
    return f"heldout_success/{target}" if target else "heldout_success"


def final_values(history: list[dict[str, Any]], tail: int, target: str | None = None) -> dict[str, float]:
    """A run's outcomes: held-out success on the target (and, with a target, on the other panel
    members, `panel_success`) at its last evaluation; training reward, success and entropy over its
    last `tail` steps."""
    last = history[-tail:]
    evaluated = [r for r in history if "heldout_success" in r][-1]
    values = {"heldout_success": float(evaluated[heldout_key(target)])}
    if target:
        panel = [v for k, v in evaluated.items() if k.startswith("heldout_success/") and k != heldout_key(target)]
        values["panel_success"] = float(np.mean(panel)) if panel else float("nan")
    return {
        **values,
        "train_reward": float(np.mean([r["reward_mean"] for r in last])),
        "train_success": float(np.mean([r["success"] for r in last])),
        "entropy": float(np.mean([r["entropy"] for r in last])),
    }


def summarize(finals: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, tuple[float, float]]]:
    return {
        method: {name: mean_interval([f[name] for f in runs]) for name in runs[0]} for method, runs in finals.items()
    }


@dataclass(frozen=True)
class PositiveControl:
    """`G`: held-out success of the arm trained on the target minus single-simulator RL's, paired
    by seed; the minimum detectable effect at these seeds; whether a remedy result may be called."""

    gap: Any  # baselines.apps.stats.PairedTest
    mde: float
    seeds: int

    @property
    def holds(self) -> bool:
        return self.gap.low > 0 and self.gap.difference >= self.mde


def positive_control(finals: dict[str, list[dict[str, float]]], *, alpha: float = 0.05) -> PositiveControl | None:
    from baselines.apps.stats import minimum_detectable_effect, paired_t_test

    if len(finals.get("heldout", [])) < 2 or len(finals.get("single", [])) < 2:
        return None
    gap = paired_t_test(*(_outcomes(finals, m) for m in ("heldout", "single")))
    return PositiveControl(gap, minimum_detectable_effect(gap.sd, gap.n, alpha=alpha), gap.n)


def remedy_effects(finals: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each remedy's held-out success minus single-simulator RL's, paired by seed."""
    from baselines.apps.stats import paired_t_test

    single = _outcomes(finals, "single")
    return {m: paired_t_test(_outcomes(finals, m), single) for m in REMEDIES if len(finals.get(m, [])) >= 2}


def _outcomes(finals: dict[str, list[dict[str, float]]], method: str) -> list[float]:
    return [f["heldout_success"] for f in finals[method]]


def _cell(value: tuple[float, float], digits: int = 3) -> str:
    mean, half = value
    return f"{mean:.{digits}f} ± {half:.{digits}f}" if not math.isnan(half) else f"{mean:.{digits}f}"


def _signed(test: Any) -> str:
    return f"{test.difference:+.3f} [{test.low:+.3f}, {test.high:+.3f}]"


def control_lines(control: PositiveControl | None, effects: dict[str, Any]) -> list[str]:
    """The report's verdict: the positive control, then each remedy only where the control holds."""
    if control is None:
        return ["No positive control was run (the `heldout` and `single` arms are needed): no remedy result is called."]
    g = control.gap
    lines = [
        "## Positive control",
        "",
        f"G = held-out success of the agent trained on the target itself minus single-simulator RL's, paired by "
        f"seed: **{_signed(g)}** (95% t-interval, {control.seeds} seeds). Minimum detectable effect of a paired "
        f"t-test at these seeds (alpha 0.05, power 0.8): **{control.mde:.3f}**.",
        "",
    ]
    if not control.holds:
        why = "its interval includes zero" if g.low <= 0 else f"G is below the MDE ({control.mde:.3f})"
        lines += [
            f"**The positive control does not hold here** ({why}): these seeds cannot show a remedy working or "
            "failing, so no remedy result is called. Run more seeds (`--seeds`) or another cell (`--gamma`, "
            "`--spread`); docs/study/v1 says where the control holds.",
            "",
            "| remedy (not called: the positive control does not hold) | minus single [95% CI] | paired p |",
            "|---|---|---|",
            *(f"| {LABELS[m]} | {_signed(t)} | {t.p_value:.2g} |" for m, t in effects.items()),
        ]
        return lines
    lines += [
        "The positive control holds: collapse costs held-out success here, and these seeds can detect an "
        "effect of the MDE's size.",
        "",
        "| remedy | minus single [95% CI] | paired p | share of G recovered |",
        "|---|---|---|---|",
    ]
    for method, test in effects.items():
        lines.append(
            f"| {LABELS[method]} | {_signed(test)} | {test.p_value:.2g} | {test.difference / g.difference:+.0%} |"
        )
    lines += [
        "",
        "An effect smaller than the MDE may exist and go undetected; p-values are not corrected here "
        "(the study, docs/study/v1, corrects them).",
    ]
    return lines


def write_report(
    settings: DemoSettings,
    finals: dict[str, list[dict[str, float]]],
    untrained: tuple[float, float],
    plots: list[Path],
    seconds: float,
) -> Path:
    out = Path(settings.out)
    tail = max(settings.steps // 10, 1)
    study = settings.study_config()
    summary = summarize(finals)
    control, effects = positive_control(finals), remedy_effects(finals)
    target = settings.target
    where = (
        f"the held-out target `{target}` (the population the simulators approximate)"
        if target
        else "the held-out panel " + ", ".join(f"`{spec}`" for spec in settings.panel_specs(0))
    )
    lines = [
        f"# {study['title']}",
        "",
        f"Training simulator: a simulator family sharpened to gamma = {settings.gamma:g} (seed 0: "
        f"`{settings.train_spec(0)}`; gamma > 1 is an aligned simulator concentrated on its modal users and "
        f"replies, the model of collapse). Family spread {settings.spread:g}: how far families stray from the "
        f"population. Every run is evaluated on {where}, on test scenarios.",
        f"{settings.seeds} seeds x {settings.steps} steps x {settings.groups} groups x {settings.group_size} episodes "
        f"per method; Verbalized Sampling k = {settings.k}; pool size {settings.pool_size}, a snapshot every "
        f"{settings.pool_every} steps; {seconds:.0f} s on {settings.jobs} processes. The model and the study: "
        "docs/demo.md, docs/study/v1.",
        kernels_line(json.loads((out / PROVENANCE).read_text())),
        "",
        *control_lines(control, effects),
        "",
        "## Every arm",
        "",
        f"Mean ± 95% interval over seeds. Held-out success: the last evaluation ({settings.eval_tasks} draws of "
        f"test scenarios x {settings.eval_samples} episodes). Training reward and success (against each arm's own "
        f"training simulator, which co-training makes adversarial), and policy entropy (nats per act), averaged "
        f"over the last {tail} steps.",
        "",
    ]
    panel_column = target is not None
    header = "| method | held-out success |" + (" other families |" if panel_column else "")
    lines += [
        header + " training reward | training success | policy entropy |",
        "|---|---|" + ("---|" if panel_column else "") + "---|---|---|",
    ]
    for method, values in summary.items():
        panel = f" {_cell(values['panel_success'])} |" if panel_column else ""
        lines.append(
            f"| {LABELS[method]} | {_cell(values['heldout_success'])} |{panel} {_cell(values['train_reward'])} | "
            f"{_cell(values['train_success'])} | {_cell(values['entropy'], 2)} |"
        )
    blank = " |" if panel_column else ""
    lines.append(f"| {study['untrained']} | {_cell(untrained)} |{blank} | | {uniform_entropy(study['env']):.2f} |")
    lines += ["", *(f"![{plot.stem}]({plot.name})" for plot in plots), ""]
    lines += ["Per-step metrics of every run: `runs/<method>-seed<seed>/metrics.jsonl`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    record = {
        "summary": {m: {k: list(v) for k, v in values.items()} for m, values in summary.items()},
        "positive_control": None
        if control is None
        else {**control.gap.as_dict(), "mde": control.mde, "holds": control.holds},
        "remedies": {m: test.as_dict() for m, test in effects.items()},
    }
    (out / "summary.json").write_text(json.dumps(record, indent=1))
    return path


def kernels_line(kernels: dict[str, Any]) -> str:
    from baselines.training.portable import is_portable

    used = (
        f"torch {kernels.get('torch_cpu_capability')} kernels on {kernels.get('torch_threads')} thread(s), numpy "
        f"{'+'.join([*kernels['numpy_baseline'], *kernels['numpy_dispatch']])}, MKL_CBWR {kernels['mkl_cbwr']}"
    )
    if is_portable(kernels):
        return f"Computed with portable kernels ({used}): the same numbers on any {kernels['machine']} CPU."
    return f"Computed with this CPU's own kernels ({used}): other CPUs may give other numbers."


def uniform_entropy(env: str) -> float:
    """The entropy (nats) of the uniform policy over the agent's acts: the untrained agent's."""
    from scope_envs.core.registration import find_env

    return float(np.log(find_env(env).make().action_space("agent").n))


def plot(
    results: dict[str, list[list[dict[str, Any]]]], out: Path, smooth: int, target: str | None = None
) -> list[Path]:
    """Training reward, held-out success and policy entropy over steps: mean over seeds, 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("reward_mean", "training reward (own simulator)", smooth),
        (heldout_key(target), "held-out success (target)", 1),
        ("entropy", "policy entropy (nats per act)", smooth),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for method, runs in results.items():
        for axis, (key, title, window) in zip(axes, panels):
            steps = [r["step"] for r in runs[0] if key in r]
            curves = np.array([[r[key] for r in history if key in r] for history in runs])
            if window > 1:
                kernel = np.ones(window) / window
                curves = np.array([np.convolve(c, kernel, mode="valid") for c in curves])
                steps = steps[window - 1 :]
            mean = curves.mean(axis=0)
            half = np.array([mean_interval(list(column))[1] for column in curves.T]) if len(runs) > 1 else 0 * mean
            axis.plot(steps, mean, label=LABELS[method], marker="o" if key.startswith("heldout") else None, ms=3)
            axis.fill_between(steps, mean - half, mean + half, alpha=0.15)
            axis.set_title(title)
            axis.set_xlabel("training step")
            axis.set_ylabel(title.split(" (")[0])
            axis.ticklabel_format(axis="y", useOffset=False)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    path = out / "curves.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def untrained_success(settings: DemoSettings) -> tuple[float, float]:
    """Held-out success of the untrained (uniform) agent, evaluated as the runs are."""
    from baselines.training.config import TrainConfig
    from baselines.training.trainer import Trainer

    values = []
    for seed in range(settings.seeds):
        config = run_config(settings, "single", seed)
        config["output_dir"] = str(Path(settings.out) / "runs" / f"untrained-seed{seed}")
        values.append(Trainer(TrainConfig(**config).validate()).evaluate(0)[heldout_key(settings.target)])
    return mean_interval(values)


def run_demo(settings: DemoSettings, *, progress: bool = True) -> Path:
    from scope_envs.core.errors import UsageError

    unknown = set(settings.methods) - set(METHODS)
    if unknown:
        raise UsageError(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    settings.study_config()  # a study that is missing or not YAML is said before any run
    started = time.perf_counter()
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    results, baseline = run_all(settings, progress=progress)
    tail = max(settings.steps // 10, 1)
    plots = plot(results, out, smooth=max(min(tail, settings.steps // 4), 1), target=settings.target)
    finals = {m: [final_values(history, tail, settings.target) for history in runs] for m, runs in results.items()}
    return write_report(settings, finals, baseline, plots, time.perf_counter() - started)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DemoSettings()
    knobs = (
        ("gamma", float, "alignment sharpening of the training simulator (p_ref ** gamma)"),
        ("k", int, "Verbalized Sampling candidates"),
        ("pool_size", int, "Population Co-Training: snapshots kept"),
        ("pool_every", int, "Population Co-Training: steps between snapshots"),
        ("seeds", int, "seeds per method"),
        ("steps", int, "training steps per run"),
        ("groups", int, "groups (personas) per step"),
        ("group_size", int, "episodes per group"),
        ("lr", float, "agent learning rate"),
        ("simulator_lr", float, "co-trained simulator learning rate"),
        ("simulator_kl", float, "co-trained simulator KL coefficient to its initial behaviour"),
        ("spread", float, "how far simulator families differ from the shared reference behaviour"),
        ("train_family", int, "the simulator family trained against"),
        ("panel", int, "held-out panel size (members numbered from the study's panel_first)"),
        ("eval_every", int, "steps between held-out evaluations"),
        ("eval_tasks", int, "test scenarios per held-out evaluation"),
        ("eval_samples", int, "episodes per test scenario and panel family"),
        ("jobs", int, "runs trained at once (processes)"),
        ("out", str, "output folder"),
        ("study", str, "the study: a YAML file or shipped config with env, policy, simulator spec templates"),
    )
    for name, kind, text in knobs:
        default = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, help=f"{text} ({default})")
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated subset of {', '.join(METHODS)} ({','.join(DEFAULT_METHODS)})",
    )


def settings_from(args: argparse.Namespace) -> DemoSettings:
    values = {name: getattr(args, name) for name in DemoSettings.__dataclass_fields__ if name != "methods"}
    return DemoSettings(**values, methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()))
