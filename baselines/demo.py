"""`scope demo`: simulator collapse and its remedies on a fast act-level benchmark, on a CPU.

The study (the shipped config `demo`: the env, the agent's policy, and templates of the training
simulator's and the held-out panel's specs) trains an agent with each method, several
seeds each, through the same trainer as the language-model runs:

* `single`: against one simulator family sharpened by `gamma` (an aligned LLM simulator);
* `vs`: against the same simulator through Verbalized Sampling with `k` candidates;
* `cotrain`: the simulator starts as that family and is trained too, adversarially;
* `population`: co-training whose groups are played by the live simulator or a pool snapshot;
* `heldout`: a reference, trained on the held-out panel itself.

Every run is evaluated on a panel of families never trained against, at their reference
behaviour (`gamma = 1`), on test scenarios. The report gives held-out success, training reward
and final policy entropy per method (mean and 95% interval over seeds) and plots them over steps.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

STUDY = "demo"  # the shipped study of that name (`scope_envs/<benchmark>/studies/demo.yaml`)

METHODS = ("single", "vs", "cotrain", "population", "heldout")
LABELS = {
    "single": "single simulator",
    "vs": "Verbalized Sampling",
    "cotrain": "Co-Training",
    "population": "Population Co-Training",
    "heldout": "held-out panel (reference)",
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
    methods: tuple[str, ...] = METHODS
    jobs: int = 2
    out: str = "runs/demo"
    study: str = STUDY

    def study_config(self) -> dict[str, Any]:
        from baselines.config import find_config

        return yaml.safe_load(find_config(self.study, kind="studies").read_text())

    def _spec(self, template: str, **extra: Any) -> str:
        return template.format(gamma=self.gamma, spread=self.spread, train_family=self.train_family, **extra)

    @property
    def train_spec(self) -> str:
        return self._spec(self.study_config()["train_simulator"])

    @property
    def panel_specs(self) -> list[str]:
        study = self.study_config()
        return [self._spec(study["panel_simulator"], member=study["panel_first"] + i) for i in range(self.panel)]


def run_config(settings: DemoSettings, method: str, seed: int) -> dict[str, Any]:
    """The trainer config (as `scope train` key=values) of one method and seed."""
    study = settings.study_config()
    config: dict[str, Any] = {
        "env": study["env"],
        "policy": study["policy"],
        "method": "single",
        "simulators": [settings.train_spec],
        "eval_simulators": settings.panel_specs,
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
            simulator_policy=settings.train_spec,
            simulator_lr=settings.simulator_lr,
            simulator_kl_coef=settings.simulator_kl,
            simulator_reward="adversarial",
        )
        if method == "population":
            config.update(pool_size=settings.pool_size, pool_every=settings.pool_every)
    elif method == "heldout":
        config.update(method="ensemble", simulators=settings.panel_specs)
    return config


_STEPS_DONE: Any = None  # a shared counter of training steps, set in each worker


def _init_worker(counter: Any) -> None:
    global _STEPS_DONE
    _STEPS_DONE = counter


def _train(config: dict[str, Any]) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(1)
    from baselines.config import TrainConfig
    from baselines.trainer import Trainer

    def tick(_: dict[str, Any]) -> None:
        if _STEPS_DONE is not None:
            with _STEPS_DONE.get_lock():
                _STEPS_DONE.value += 1

    return Trainer(TrainConfig(**config).validate()).run(progress=False, on_step=tick, overwrite=True)


def run_all(settings: DemoSettings, *, progress: bool = True) -> dict[str, list[list[dict[str, Any]]]]:
    """Every method x seed, `settings.jobs` at a time; the metric histories per method."""
    from tqdm.auto import tqdm

    jobs = [(method, seed) for method in settings.methods for seed in range(settings.seeds)]
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    counter = context.Value("i", 0)
    bar = tqdm(total=len(jobs) * settings.steps, desc="demo", unit="step", disable=not progress)
    done = threading.Event()

    def follow() -> None:
        while not done.wait(0.25):
            bar.n = counter.value
            bar.refresh()

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    try:
        with ProcessPoolExecutor(
            max_workers=settings.jobs, mp_context=context, initializer=_init_worker, initargs=(counter,)
        ) as pool:
            futures = {job: pool.submit(_train, run_config(settings, *job)) for job in jobs}
            histories = {job: future.result() for job, future in futures.items()}
    finally:
        done.set()
        watcher.join()
        bar.n = counter.value
        bar.close()
    return {method: [histories[(method, seed)] for seed in range(settings.seeds)] for method in settings.methods}


# ---- summaries -------------------------------------------------------------------------------------


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% t-interval."""
    array = np.asarray(values, float)
    if len(array) < 2:
        return float(array.mean()), float("nan")
    t = T_975[len(array) - 2] if len(array) - 1 <= len(T_975) else 1.96
    return float(array.mean()), float(t * array.std(ddof=1) / math.sqrt(len(array)))


def final_values(history: list[dict[str, Any]], tail: int) -> dict[str, float]:
    last = history[-tail:]
    evaluated = [r for r in history if "heldout_success" in r]
    return {
        "heldout_success": evaluated[-1]["heldout_success"],
        "train_reward": float(np.mean([r["reward_mean"] for r in last])),
        "train_success": float(np.mean([r["success"] for r in last])),
        "entropy": float(np.mean([r["entropy"] for r in last])),
    }


def summarize(results: dict[str, list[list[dict[str, Any]]]], tail: int) -> dict[str, dict[str, tuple[float, float]]]:
    summary = {}
    for method, runs in results.items():
        finals = [final_values(history, tail) for history in runs]
        summary[method] = {name: mean_interval([f[name] for f in finals]) for name in finals[0]}
    return summary


def _cell(value: tuple[float, float], digits: int = 3) -> str:
    mean, half = value
    return f"{mean:.{digits}f} ± {half:.{digits}f}" if not math.isnan(half) else f"{mean:.{digits}f}"


def write_report(
    settings: DemoSettings,
    summary: dict[str, dict[str, tuple[float, float]]],
    untrained: tuple[float, float],
    plots: list[Path],
    seconds: float,
) -> Path:
    out = Path(settings.out)
    tail = max(settings.steps // 10, 1)
    study = settings.study_config()
    panel = ", ".join(f"`{spec}`" for spec in settings.panel_specs)
    lines = [
        f"# {study['title']}",
        "",
        f"Training simulator: family {settings.train_family} sharpened to gamma = {settings.gamma:g} "
        f"(`{settings.train_spec}`). Held-out panel: {panel} "
        f"at their reference behaviour (gamma = 1), on test scenarios; family spread {settings.spread:g}.",
        f"{settings.seeds} seeds x {settings.steps} steps x {settings.groups} groups x {settings.group_size} episodes "
        f"per method; Verbalized Sampling k = {settings.k}; pool size {settings.pool_size}, a snapshot every "
        f"{settings.pool_every} steps; {seconds:.0f} s on {settings.jobs} processes.",
        "",
        f"Mean ± 95% interval over seeds. Held-out success: the last evaluation ({settings.eval_tasks} draws of "
        f"test scenarios x {settings.eval_samples} episodes per panel family). Training reward and success, and "
        f"policy entropy (nats per act), averaged over the last {tail} steps.",
        "",
        "| method | held-out success | training reward | training success | policy entropy |",
        "|---|---|---|---|---|",
    ]
    for method, values in summary.items():
        lines.append(
            f"| {LABELS[method]} | {_cell(values['heldout_success'])} | {_cell(values['train_reward'])} | "
            f"{_cell(values['train_success'])} | {_cell(values['entropy'], 2)} |"
        )
    lines.append(f"| {study['untrained']} | {_cell(untrained)} | | | {uniform_entropy(study['env']):.2f} |")
    if study.get("regime"):  # what the study's sweep found about where the effect is clear, and where not
        lines += ["", " ".join(str(study["regime"]).split())]
    lines += ["", *(f"![{plot.stem}]({plot.name})" for plot in plots), ""]
    lines += ["Per-step metrics of every run: `runs/<method>-seed<seed>/metrics.jsonl`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    (out / "summary.json").write_text(json.dumps({m: {k: list(v) for k, v in s.items()} for m, s in summary.items()}))
    return path


def uniform_entropy(env: str) -> float:
    """The entropy (nats) of the uniform policy over the agent's acts: the untrained agent's."""
    from scope_envs.core.registration import find_env

    return float(np.log(find_env(env).make().action_space("agent").n))


def plot(results: dict[str, list[list[dict[str, Any]]]], out: Path, smooth: int) -> list[Path]:
    """Training reward, held-out success and policy entropy over steps: mean over seeds, 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("reward_mean", "training reward", smooth),
        ("heldout_success", "held-out success", 1),
        ("entropy", "policy entropy (nats)", smooth),
    )
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
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
            axis.plot(steps, mean, label=LABELS[method], marker="o" if key == "heldout_success" else None, ms=3)
            axis.fill_between(steps, mean - half, mean + half, alpha=0.15)
            axis.set_title(title)
            axis.set_xlabel("step")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    path = out / "curves.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return [path]


def untrained_success(settings: DemoSettings) -> tuple[float, float]:
    """Held-out success of the untrained (uniform) agent, evaluated as the runs are."""
    from baselines.config import TrainConfig
    from baselines.trainer import Trainer

    values = []
    for seed in range(settings.seeds):
        config = run_config(settings, "single", seed)
        config["output_dir"] = str(Path(settings.out) / "runs" / f"untrained-seed{seed}")
        values.append(Trainer(TrainConfig(**config).validate()).evaluate(0)["heldout_success"])
    return mean_interval(values)


def run_demo(settings: DemoSettings, *, progress: bool = True) -> Path:
    unknown = set(settings.methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    started = time.perf_counter()
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run_all(settings, progress=progress)
    tail = max(settings.steps // 10, 1)
    plots = plot(results, out, smooth=max(min(tail, settings.steps // 4), 1))
    baseline = untrained_success(settings)
    return write_report(settings, summarize(results, tail), baseline, plots, time.perf_counter() - started)


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
        "--methods", default=",".join(METHODS), help=f"comma-separated subset of {', '.join(METHODS)} (all)"
    )


def settings_from(args: argparse.Namespace) -> DemoSettings:
    values = {name: getattr(args, name) for name in DemoSettings.__dataclass_fields__ if name != "methods"}
    return DemoSettings(**values, methods=tuple(m.strip() for m in args.methods.split(",") if m.strip()))
