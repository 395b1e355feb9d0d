"""`scope demo`: simulator collapse and its remedies on a fast act-level benchmark, on a CPU.

The study (a shipped config, `collapse_v1` by default: the env, the agent's policy, and templates
of the training simulator's, the held-out target's and the panel's specs) trains an agent with
each method, several seeds each, through the same trainer as the language-model runs:

* `single`: against one simulator family sharpened by `gamma` (an aligned LLM simulator);
* `heldout`: the positive control, trained on the held-out target itself (what a perfect remedy
  would reach);
* `unsharpened`: against the same family unsharpened (gamma 1): Verbalized Sampling's ceiling;
* `diverse`: against an ensemble of other unsharpened families: a diversity remedy's ceiling;
* `vs`: against the training simulator through Verbalized Sampling (`k` candidates, `vs_draw`:
  uniform over them by default, as the paper's main runs); `vs_prob`: the draw in proportion to the
  verbalized probabilities, the paper's ablation;
* `cotrain`: a co-trained simulator that starts from another, unsharpened family (as the paper's
  starts from another model), KL-anchored there, rewarded by `simulator_reward`;
* `population`: the same, its groups played by the live simulator or a pool snapshot.

Every run is evaluated on the held-out target (the fitted population; in the v0 study, a panel of
families) on test scenarios, and on a panel of other families (between-family transfer). The
report first gives the manipulation checks (`baselines.apps.verdicts`): the gap `G` between
`heldout` and `single` with its sharpening and family parts, each remedy's ceiling, and fidelity
checks (how close Verbalized Sampling comes to the unsharpened family; whether the pool varies);
then each remedy's verdict by the rule the study pre-registered: helps, negligible, inconclusive,
or not testable here.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from baselines.training.rollouts import HELDOUT_SUCCESS

PROVENANCE = "kernels.json"  # what the runs computed with, beside summary.json (which holds only results)
STUDY = "collapse_v1"  # the shipped study of that name (`scope_envs/<benchmark>/studies/collapse_v1.yaml`)

METHODS = ("single", "heldout", "unsharpened", "diverse", "vs", "vs_prob", "cotrain", "population")
DEFAULT_METHODS = ("single", "heldout", "unsharpened", "diverse", "vs", "population")
REMEDIES = ("vs", "vs_prob", "cotrain", "population")
CO_TRAINED = ("cotrain", "population")
LABELS = {
    "single": "single simulator",
    "vs": "Verbalized Sampling",
    "vs_prob": "Verbalized Sampling, drawn by probability (ablation)",
    "cotrain": "Co-Training",
    "population": "Population Co-Training",
    "heldout": "trained on the held-out target (positive control)",
    "unsharpened": "the training family unsharpened (VS ceiling)",
    "diverse": "unsharpened families, an ensemble (diversity ceiling)",
}
VS_FIDELITY_DRAWS = 2000  # Monte Carlo draws per probe state of Verbalized Sampling's reply distribution
VS_FIDELITY_STATES = 200
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
    # the paper's co-trained simulator: KL 0.005-0.01 to its start (another model), a curriculum reward
    simulator_kl: float = 0.01
    simulator_reward: str = "curriculum"
    vs_draw: str = "random"  # the paper's main runs: uniform over the k listed candidates
    pool_draw: str = "batch"  # the paper's: one pool member per rollout batch
    diverse: int = 4  # unsharpened families in the diversity ceiling's ensemble
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

    def _spec(self, template: str, seed: int, gamma: float | None = None, **extra: Any) -> str:
        family = self.study_config().get("train_family_first", self.train_family - seed) + seed
        gamma = self.gamma if gamma is None else gamma
        return template.format(gamma=gamma, spread=self.spread, train_family=family, **extra)

    def train_spec(self, seed: int, gamma: float | None = None) -> str:
        """The training simulator of a seed: the study's family for it (`train_family_first + seed`),
        or `train_family` for every seed where the study names none; sharpened by `gamma` (the
        demo's by default; 1: the same family unsharpened)."""
        return self._spec(self.study_config()["train_simulator"], seed, gamma)

    def _members(self, first_key: str, default_first: int, seed: int, count: int) -> list[str]:
        """`count` unsharpened families of a seed, numbered from the study's `first_key`."""
        study = self.study_config()
        first = study.get(first_key, default_first) + seed * count
        return [self._spec(study["panel_simulator"], seed, member=first + i) for i in range(count)]

    def diverse_specs(self, seed: int) -> list[str]:
        """The diversity ceiling's ensemble of a seed: unsharpened families never evaluated on."""
        return self._members("diverse_first", 3000, seed, self.diverse)

    def start_spec(self, seed: int) -> str:
        """Where a seed's co-trained simulator starts and is KL-anchored: another family, unsharpened
        (the paper starts it from another model, not from the simulator single-simulator RL uses)."""
        return self._members("start_first", 4000, seed, 1)[0]

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
        config.update(method="vs", vs_k=settings.k, vs_draw=settings.vs_draw)
    elif method == "vs_prob":
        config.update(method="vs", vs_k=settings.k, vs_draw="prob")
    elif method == "unsharpened":
        config.update(simulators=[settings.train_spec(seed, gamma=1.0)])
    elif method == "diverse":
        config.update(method="ensemble", simulators=settings.diverse_specs(seed))
    elif method in CO_TRAINED:
        config.update(
            method=method,
            simulator_policy=settings.start_spec(seed),
            simulator_lr=settings.simulator_lr,
            simulator_kl_coef=settings.simulator_kl,
            simulator_reward=settings.simulator_reward,
        )
        if method == "population":
            config.update(pool_size=settings.pool_size, pool_every=settings.pool_every, pool_draw=settings.pool_draw)
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
    longest_first = sorted(settings.methods, key=lambda m: m not in CO_TRAINED)
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
    return f"{HELDOUT_SUCCESS}/{target}" if target else HELDOUT_SUCCESS


def final_values(history: list[dict[str, Any]], tail: int, target: str | None = None) -> dict[str, float]:
    """A run's outcomes: held-out success on the target (and, with a target, on the other panel
    members, `panel_success`) at its last evaluation; training reward, success and entropy over its
    last `tail` steps; a population's last pool diversity."""
    last = history[-tail:]
    evaluated = [r for r in history if HELDOUT_SUCCESS in r][-1]
    values = {HELDOUT_SUCCESS: float(evaluated[heldout_key(target)])}
    panel = [v for k, v in evaluated.items() if k.startswith(f"{HELDOUT_SUCCESS}/") and k != heldout_key(target)]
    if target and panel:  # no NaN where there is no panel: a rerun's NaN would never equal the record's
        values["panel_success"] = float(np.mean(panel))
    values.update(
        train_reward=float(np.mean([r["reward_mean"] for r in last])),
        train_success=float(np.mean([r["success"] for r in last])),
        entropy=float(np.mean([r["entropy"] for r in last])),
    )
    diversity = [r["pool/diversity"] for r in history if "pool/diversity" in r]
    if diversity:  # a population's: how much its pool's members differ at the end
        values["pool_diversity"] = float(diversity[-1])
    return values


def summarize(finals: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, tuple[float, float]]]:
    return {
        method: {name: mean_interval([f[name] for f in runs]) for name in runs[0] if name != "pool_diversity"}
        for method, runs in finals.items()
    }


def outcomes_by_arm(finals: dict[str, list[dict[str, float]]]) -> dict[str, list[float]]:
    """Held-out success of every arm, in seed order."""
    return {method: [f[HELDOUT_SUCCESS] for f in runs] for method, runs in finals.items()}


def _cell(value: tuple[float, float], digits: int = 3) -> str:
    mean, half = value
    return f"{mean:.{digits}f} ± {half:.{digits}f}" if not math.isnan(half) else f"{mean:.{digits}f}"


def _signed(test: Any) -> str:
    return f"{test.difference:+.3f} [{test.low:+.3f}, {test.high:+.3f}]"


@dataclass(frozen=True)
class Fidelity:
    """Do the remedies do what they claim? Verbalized Sampling: the mean per-state total-variation
    distance of its replies from the unsharpened family's, beside the sharpened family's; the
    population: the mean pairwise distance between its pool's members at the end of training."""

    vs_to_unsharpened: float = float("nan")  # the draw the `vs` arm uses (`vs_draw`)
    vs_prob_to_unsharpened: float = float("nan")  # the draw by verbalized probability (`vs_prob`)
    sharpened_to_unsharpened: float = float("nan")
    unsharpened_to_target: float = float("nan")
    pool_diversity: float = float("nan")
    states: int = 0

    def as_dict(self) -> dict[str, float]:
        return dict(vars(self))


def vs_fidelity(settings: DemoSettings, seeds: Iterable[int]) -> Fidelity:
    """Verbalized Sampling's distance from the unsharpened family, on the study's probe states
    (the persuadee's turns of scripted conversations: `probe_states` in the study), averaged over
    each seed's training family; nothing where the study names no probe states."""
    from scope_envs.core.registration import find_env
    from scope_envs.core.specs import import_object, make_policy, wrapped
    from sims.reply_distance import mean_total_variation

    study = settings.study_config()
    if "probe_states" not in study:
        return Fidelity()
    env = find_env(study["env"]).make()
    features, mask = import_object(study["probe_states"])(env, VS_FIDELITY_STATES, seed=0)

    def simulator(spec: str) -> Any:
        return make_policy(spec, env=env, side="user")

    draws: dict[str, list[float]] = {"vs": [], "vs_prob": [], "sharpened": [], "target": []}
    for seed in seeds:
        rng = np.random.default_rng(seed)

        def distance(a: Any, b: Any) -> float:
            return mean_total_variation(a, b, features, mask, draws=VS_FIDELITY_DRAWS, rng=rng)  # noqa: B023

        unsharpened = simulator(settings.train_spec(seed, gamma=1.0))
        sharpened_spec = settings.train_spec(seed)
        draw = "vs" if settings.vs_draw == "random" else "vsprob"
        draws["vs"].append(distance(simulator(wrapped(draw, sharpened_spec, settings.k)), unsharpened))
        draws["vs_prob"].append(distance(simulator(wrapped("vsprob", sharpened_spec, settings.k)), unsharpened))
        draws["sharpened"].append(distance(simulator(sharpened_spec), unsharpened))
        if settings.target:
            draws["target"].append(distance(unsharpened, simulator(settings.target)))
    means = {key: float(np.mean(values)) if values else float("nan") for key, values in draws.items()}
    return Fidelity(means["vs"], means["vs_prob"], means["sharpened"], means["target"], states=len(features))


def pool_diversity(finals: list[dict[str, float]]) -> float:
    """The population's pool diversity at the end of training, averaged over seeds."""
    values = [f["pool_diversity"] for f in finals if "pool_diversity" in f]
    return float(np.mean(values)) if values else float("nan")


def check_lines(checks: Any, fidelity: Fidelity, seeds: int) -> list[str]:
    """The manipulation checks: G with its parts, each ceiling, the fidelity checks."""
    from baselines.apps.verdicts import DIVERSE, UNSHARPENED

    if checks.gap is None:
        return ["No positive control was run (the `heldout` and `single` arms are needed): no remedy result is called."]
    rows = [("G = held-out-trained minus single (positive control)", checks.gap)]
    if checks.sharpening is not None:
        rows += [
            ("sharpening part: unsharpened minus single", checks.sharpening),
            ("family part: held-out-trained minus unsharpened", checks.family),
        ]
    names = {UNSHARPENED: "Verbalized Sampling's ceiling", DIVERSE: "a diversity remedy's ceiling"}
    rows += [(f"{names[arm]}: {arm} minus single", test) for arm, test in checks.ceilings.items()]
    lines = [
        "## Manipulation checks",
        "",
        f"Held-out success, paired by seed ({seeds} seeds), 95% t-intervals. Smallest effect of interest: "
        f"G / 2 = **{checks.sesoi:.3f}**.",
        "",
        "| check | difference [95% CI] |",
        "|---|---|",
        *(f"| {name} | {_signed(test)} |" for name, test in rows),
        "",
    ]
    if not math.isnan(fidelity.vs_to_unsharpened):
        lines.append(
            f"Fidelity: Verbalized Sampling's replies are {fidelity.vs_to_unsharpened:.3f} (mean per-state total "
            f"variation, {fidelity.states} probe states; {fidelity.vs_prob_to_unsharpened:.3f} drawn by probability) "
            "from the unsharpened family's; the sharpened family's are "
            f"{fidelity.sharpened_to_unsharpened:.3f}"
            + (
                f", and the unsharpened family is {fidelity.unsharpened_to_target:.3f} from the target."
                if not math.isnan(fidelity.unsharpened_to_target)
                else " (the study has no single target to compare with)."
            )
        )
    if not math.isnan(fidelity.pool_diversity):
        lines.append(
            f"Fidelity: the population's pool members differ by {fidelity.pool_diversity:.3f} (mean pairwise total "
            "variation of their replies) at the end of training."
        )
    return [*lines, ""] if lines[-1] else lines


def verdict_lines(checks: Any, verdicts: list[Any]) -> list[str]:
    """Each remedy's effect, interval, power and verdict, by the pre-registered rule."""
    if not verdicts:
        return []
    lines = [
        "## Remedies",
        "",
        "Each remedy minus single-simulator RL, paired by seed. Verdict (docs/study/v2/preregistration.md): "
        "**helps** where the Holm-adjusted p < 0.05 and the difference is positive; **negligible** where the "
        "one-sided 95% upper bound is below the smallest effect of interest; otherwise **inconclusive**; "
        "**not testable here** where G is not confirmed or the remedy's ceiling is below the smallest effect.",
        "",
        "| remedy | minus single [95% CI] | Holm p | power at G/2 | verdict |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        effect = _signed(v.test) if v.test is not None else "-"
        held = v.verdict + (" (harms)" if v.harms else "") + f": {v.reason}"
        p = f"{v.adjusted_p:.2g}" if not math.isnan(v.adjusted_p) else "-"
        power = f"{v.power:.2f}" if not math.isnan(v.power) else "-"
        lines.append(f"| {LABELS[v.remedy]} | {effect} | {p} | {power} | {held} |")
    return [*lines, ""]


def write_report(
    settings: DemoSettings,
    finals: dict[str, list[dict[str, float]]],
    untrained: tuple[float, float],
    plots: list[Path],
    seconds: float,
    fidelity: Fidelity | None = None,
) -> Path:
    from baselines.apps.verdicts import manipulation_checks, remedy_verdicts
    from scope_envs.core.jsonable import finite_or_null

    out = Path(settings.out)
    tail = max(settings.steps // 10, 1)
    study = settings.study_config()
    summary = summarize(finals)
    fidelity = fidelity or Fidelity()
    outcomes = outcomes_by_arm(finals)
    checks = manipulation_checks(outcomes)
    verdicts = remedy_verdicts(outcomes, REMEDIES, checks)
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
        f"per method; Verbalized Sampling k = {settings.k}, draw `{settings.vs_draw}`; the co-trained simulator "
        f"starts from another family unsharpened (seed 0: `{settings.start_spec(0)}`), KL {settings.simulator_kl:g} "
        f"to it, reward `{settings.simulator_reward}`; pool size {settings.pool_size}, a snapshot every "
        f"{settings.pool_every} steps, drawn per {settings.pool_draw}; {seconds:.0f} s on {settings.jobs} processes. "
        "The model and the study: docs/demo.md, docs/study/v2.",
        kernels_line(json.loads((out / PROVENANCE).read_text())),
        "",
        *check_lines(checks, fidelity, settings.seeds),
        *verdict_lines(checks, verdicts),
        "## Every arm",
        "",
        f"Mean ± 95% interval over seeds. Held-out success: the last evaluation ({settings.eval_tasks} draws of "
        f"test scenarios x {settings.eval_samples} episodes). Training reward and success (against each arm's own "
        f"training simulators, which co-training trains too), and policy entropy (nats per act), averaged "
        f"over the last {tail} steps.",
        "",
    ]
    panel_column = target is not None and settings.panel > 0
    header = "| method | held-out success |" + (" other families |" if panel_column else "")
    lines += [
        header + " training reward | training success | policy entropy |",
        "|---|---|" + ("---|" if panel_column else "") + "---|---|---|",
    ]
    for method, values in summary.items():
        panel = f" {_cell(values['panel_success'])} |" if panel_column else ""
        lines.append(
            f"| {LABELS[method]} | {_cell(values[HELDOUT_SUCCESS])} |{panel} {_cell(values['train_reward'])} | "
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
        "checks": checks.as_dict(),
        "fidelity": fidelity.as_dict(),
        "verdicts": {v.remedy: v.as_dict() for v in verdicts},
    }
    (out / "summary.json").write_text(json.dumps(finite_or_null(record), indent=1, allow_nan=False))
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
    fidelity = vs_fidelity(settings, range(settings.seeds)) if "vs" in settings.methods else Fidelity()
    if "population" in finals:
        fidelity = replace(fidelity, pool_diversity=pool_diversity(finals["population"]))
    return write_report(settings, finals, baseline, plots, time.perf_counter() - started, fidelity)


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
        ("simulator_reward", str, "co-trained simulator's reward: curriculum, adversarial or cooperative"),
        ("vs_draw", str, "Verbalized Sampling's draw: random (uniform over the k listed) or prob"),
        ("pool_draw", str, "Population Co-Training: one pool member per batch, or per group"),
        ("diverse", int, "unsharpened families in the diversity ceiling's ensemble"),
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
        if name in STUDY_KNOBS:  # a study may set its own (`gamma:` and `spread:` in its YAML)
            shown, default = f"the study's, else {default}", None
        else:
            shown = default
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default, help=f"{text} ({shown})")
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated subset of {', '.join(METHODS)} ({','.join(DEFAULT_METHODS)})",
    )


STUDY_KNOBS = ("gamma", "spread")  # settings a study's YAML may give, which its command line overrides


def settings_from(args: argparse.Namespace) -> DemoSettings:
    values = {name: getattr(args, name) for name in DemoSettings.__dataclass_fields__ if name != "methods"}
    settings = DemoSettings(**{k: v for k, v in values.items() if v is not None})
    study = settings.study_config()
    chosen = {name: study[name] for name in STUDY_KNOBS if values[name] is None and name in study}
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    return replace(settings, **chosen, methods=methods)
