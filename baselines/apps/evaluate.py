"""`scope evaluate`: cross-play of agents against a panel of simulators, with pass^k and intervals.

Every agent plays every simulator on one fixed task set: task t is the scenario the env's own
`reset` picks from `derive_seed(seed, t)` on the chosen split, the same for every cell, and each
task is played `trials` times. Each (agent, simulator) cell is played through the env's rollout
(its vectorized one where it has one, else chat episodes: per episode when a player answers
asynchronously, such as an API simulator, else in lockstep) and cached as JSON under
`<out>/cells/`, keyed by everything that determines it, so an interrupted evaluation resumes and a
repeated one costs nothing.

Agents: a run folder (`config.yaml` and `checkpoints/`: the trained side of its newest intact
checkpoint), or a policy spec (`scripted`, `linear`, `family:3`, `openai:MODEL`, ...).
Simulators: a policy spec; `vs:SPEC` or `vsK:SPEC` (Verbalized Sampling with k candidates,
5 by default); a run folder of a co-training run (its trained simulator); `pool:RUN` (every
snapshot in the run's simulator pool, one simulator each).

Reported per cell: success and reward with bootstrap 95% intervals over tasks, pass^k for
k = 1..trials (Yao et al. 2024, `baselines.apps.stats.pass_hat_k`) and the flip rate across trials; per
agent, success over its held-out panel: the simulators it did not train against (a run's training
simulators are read from its config, shown apart and marked (T)), and the minimum detectable
difference at these tasks x trials; between every two agents, the paired difference on the same
tasks over the simulators held out from both (bootstrap interval, Wilcoxon signed-rank p,
Holm-adjusted over the pairs, its MDE). Written: `evaluation.md`, `evaluation.json` and
`heatmap.png` (agents x simulators).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from baselines.arguments import add_env_arg, env_kwargs_of, failed
from baselines.training.run import Run, RunError, is_run
from scope_envs.core.async_rollout import collect_async
from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.extras import needs_extra
from scope_envs.core.policy import any_native_async
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import RolloutGroup, collect_chat
from scope_envs.core.seeding import derive_seed
from scope_envs.core.specs import Spec, format_spec, parse_spec, wrap_policy

POOL_PREFIX = "pool:"
ALL_TASKS = "all"


@dataclass
class Player:
    """A policy in the cross-play, its label in the report, and what identifies it for the cache.

    `sources`: what a simulator is (its spec, or the run it came from); `trained_on`: for an agent
    that is a run, the sources of the simulators it trained against, read from its config."""

    label: str
    policy: Any
    identity: str
    sources: frozenset[str] = frozenset()
    trained_on: frozenset[str] = frozenset()


@dataclass
class CellResult:
    agent: str
    simulator: str
    scenario_ids: list[str]
    successes: list[list[float]]  # [tasks][trials]
    rewards: list[list[float]]
    key: dict[str, Any] = field(default_factory=dict)


# ---- who plays -----------------------------------------------------------------------------------


def load_run(path: str | Path) -> Run:
    """A run folder (an error if it is none); its policies load from its newest intact checkpoint."""
    return Run(path)


def _run_source(folder: str | Path) -> str:
    return f"run:{Path(folder).resolve()}"


def spec_sources(spec: str, policy: Any = None) -> frozenset[str]:
    """What a simulator spec stands for: the spec itself, and the class and name of the policy it
    builds, so that two spellings of one simulator (`family:0@3`, `family:0@3/spread1`) match."""
    sources = {f"spec:{spec}"}
    name = getattr(policy, "name", None)
    if isinstance(name, str) and name:
        sources.add(f"policy:{type(policy).__module__}.{type(policy).__qualname__}:{name}")
    return frozenset(sources)


def _registered_policy(spec: str, env: Any, side: str) -> Any:
    """The policy of a registered (scripted or API) spec, or None: a language model is not loaded
    just to learn its name, and a spec that does not build here is known by its spelling only."""
    from scope_envs.core.specs import make_policy, policy_backends, split_spec

    if spec != "scripted" and split_spec(spec)[0] not in ("scripted", *policy_backends()):
        return None
    try:
        return make_policy(spec, env=env, side=side)
    except Exception:
        return None


def training_sources(run: Run, env: Any, side: str) -> frozenset[str]:
    """The simulators a run trained against, as `Player.sources` name them: its `simulators`, and
    for co-training its simulator's initial checkpoint and the run itself (its live simulator and
    its pool). `side` is the side its simulators played."""
    config = run.config
    specs = list(config.simulators)
    sources: set[str] = set()
    trained = [learner for trained_side, learner in run.method.learners().items() if trained_side != config.side]
    if trained:
        specs.extend(learner.policy for learner in trained)
        sources.add(_run_source(run.folder))
    for spec in specs:
        sources |= spec_sources(spec, _registered_policy(spec, env, side))
    return frozenset(sources)


def build_agent(spec: str, env: Any, side: str = AGENT) -> Player:
    """An agent: the trained side of a run folder, or a policy spec."""
    if is_run(spec):
        run = load_run(spec)
        trained = run.trained_sides()
        if side not in trained:
            raise ValueError(f"{spec}: the run trained the {run.config.side!r} side, not {side!r}")
        policy = run.policy(side, env=env)
        identity = f"run:{run.checkpoint_identity()}:{side}"
        return Player(
            Path(spec).name,
            policy,
            identity,
            sources=frozenset({_run_source(spec)}),
            trained_on=training_sources(run, env, USER if side == AGENT else AGENT),
        )
    policy = _policy(spec, env, side)
    return Player(spec, policy, f"spec:{spec}", sources=spec_sources(spec, policy))


def build_simulators(spec: str, env: Any, side: str = USER) -> list[Player]:
    """The simulators a `--simulators` item stands for (a pool stands for several)."""

    parsed = parse_spec(spec)
    if parsed.wrappers:  # `vs3:SPEC`: the players SPEC stands for, each wrapped, labelled as a spec
        # Verbalized Sampling of a training simulator samples the same model: not held out
        return [
            Player(
                format_spec(Spec(parsed.wrappers, p.label)),
                wrap_policy(p.policy, parsed.wrappers),
                format_spec(Spec(parsed.wrappers, p.identity)),
                sources=p.sources,
            )
            for p in build_simulators(parsed.base, env, side)
        ]
    if spec.startswith(POOL_PREFIX):
        run = load_run(spec.removeprefix(POOL_PREFIX))
        pool = run.pool(env=env)
        if pool is None or not pool.members:
            raise ValueError(f"{spec}: the run has no simulator pool (only population runs keep one)")
        return [
            Player(
                f"{run.name}@{m.step}",
                pool.load(m),
                f"pool:{run.folder.resolve()}:{m.id}:{m.step}",
                sources=frozenset({_run_source(run.folder)}),
            )
            for m in pool.members
        ]
    if is_run(spec):
        player = build_agent(spec, env, side)
        return [Player(f"{player.label}:{side}", player.policy, player.identity, sources=player.sources)]
    policy = _policy(spec, env, side)
    return [Player(spec, policy, f"spec:{spec}", sources=spec_sources(spec, policy))]


def training_cells(agents: list[Player], simulators: list[Player]) -> dict[str, list[str]]:
    """Per agent, the labels of the simulators of the panel it trained against."""
    return {a.label: [s.label for s in simulators if s.sources & a.trained_on] for a in agents}


def _policy(spec: str, env: Any, side: str) -> Any:
    """A policy spec: a registered backend (`make_policy`), else a trainable model or act policy
    at its initial weights (`linear`, `tiny`, `hf:...`)."""
    from baselines.training.policy import build_policy
    from scope_envs.core.specs import make_policy, policy_backends, split_spec

    if spec == "scripted" or split_spec(spec)[0] in ("scripted", *policy_backends()):
        return make_policy(spec, env=env, side=side)
    return build_policy(spec, temperature=1.0, max_new_tokens=256, device=None, lora=None, seed=0, env=env, side=side)


# ---- playing the cells ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSettings:
    env: str
    tasks: int | str = 50  # "all": every task of the split once, in the env's order
    trials: int = 4
    split: str = "test"
    seed: int = 0
    side: str = AGENT
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> EvalSettings:
        if self.tasks != ALL_TASKS and (not isinstance(self.tasks, int) or self.tasks < 1):
            raise ValueError(f"tasks must be a number of at least 1 or {ALL_TASKS!r}, got {self.tasks!r}")
        if self.trials < 1:
            raise ValueError("tasks and trials must be at least 1")
        if self.side not in (AGENT, USER):
            raise ValueError(f"side must be {AGENT!r} or {USER!r}")
        find_env(self.env)
        return self


def cell_key(settings: EvalSettings, agent: Player, simulator: Player) -> dict[str, Any]:
    return {
        "env": settings.env,
        "env_kwargs": settings.env_kwargs,
        "split": settings.split,
        "tasks": settings.tasks,
        "trials": settings.trials,
        "seed": settings.seed,
        "side": settings.side,
        "agent": agent.identity,
        "simulator": simulator.identity,
    }


def cell_path(out: Path, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return out / "cells" / f"{digest}.json"


def task_list(settings: EvalSettings) -> list[str | None]:
    """The task of each group: every task of the split (`tasks="all"`), or `tasks` drawn by the seeds (None)."""
    if settings.tasks != ALL_TASKS:
        return [None] * int(settings.tasks)
    env = find_env(settings.env).make(**settings.env_kwargs)
    if not hasattr(env, "task_ids"):
        raise ValueError(f"{settings.env} does not list its tasks: pass a number of tasks")
    return list(env.task_ids(settings.split))


def play_cell(settings: EvalSettings, agent: Player, simulator: Player) -> CellResult:
    """`tasks` x `trials` episodes of one agent against one simulator."""
    info = find_env(settings.env)
    partner = USER if settings.side == AGENT else AGENT
    players = {settings.side: agent.policy, partner: simulator.policy}
    rollout = info.rollout_function() or (collect_async if any_native_async(players.values()) else collect_chat)
    task_ids = task_list(settings)
    groups = [RolloutGroup(derive_seed(settings.seed, index), players, task) for index, task in enumerate(task_ids)]
    episodes = rollout(
        lambda: info.make(**settings.env_kwargs),
        groups,
        group_size=settings.trials,
        split=settings.split,
        key=(settings.seed,),
    )
    successes = [[0.0] * settings.trials for _ in groups]
    rewards = [[0.0] * settings.trials for _ in groups]
    scenario_ids = [""] * len(groups)
    seen = [0] * len(groups)
    for episode in episodes:
        task = episode.group
        successes[task][seen[task]] = float(episode.success(settings.side))
        rewards[task][seen[task]] = float(episode.rewards[settings.side])
        scenario_ids[task] = episode.scenario_id
        seen[task] += 1
    return CellResult(agent.label, simulator.label, scenario_ids, successes, rewards)


def run_cells(
    settings: EvalSettings, agents: list[Player], simulators: list[Player], out: Path, *, progress: bool = True
) -> list[CellResult]:
    """Every agent x simulator cell, read from the cache where it was already played."""
    from tqdm.auto import tqdm

    out.mkdir(parents=True, exist_ok=True)
    results = []
    pairs = list(itertools.product(agents, simulators))
    for agent, simulator in tqdm(pairs, desc="evaluate", unit="cell", disable=not progress):
        key = cell_key(settings, agent, simulator)
        path = cell_path(out, key)
        if path.is_file():
            cached = json.loads(path.read_text())
            if cached.get("key") == json.loads(json.dumps(key, default=str)):
                results.append(CellResult(**{**cached, "agent": agent.label, "simulator": simulator.label}))
                continue
        result = play_cell(settings, agent, simulator)
        result.key = key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result.__dict__, default=str))
        tmp.replace(path)
        results.append(result)
    return results


# ---- the report ----------------------------------------------------------------------------------


def summarize(
    results: list[CellResult], trials: int, seed: int = 0, training: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """Per cell, per agent and per pair of agents: the numbers of the report. `training` names,
    per agent, the simulators it trained against: they are reported but left out of its panel."""
    from baselines.apps.stats import (
        ALPHA,
        POWER,
        bootstrap_interval,
        flip_rate,
        flip_rate_per_task,
        minimum_detectable_difference,
        mixed_share,
        paired_comparison,
        pass_hat_k,
    )
    from scope_envs.core.stats import holm

    training = training or {}
    cells = []
    for r in results:
        successes, rewards = np.asarray(r.successes), np.asarray(r.rewards)
        cells.append(
            {
                "agent": r.agent,
                "simulator": r.simulator,
                "training": r.simulator in training.get(r.agent, []),
                "success": bootstrap_interval(successes.mean(axis=1), seed=seed).as_dict(),
                "reward": bootstrap_interval(rewards.mean(axis=1), seed=seed).as_dict(),
                "pass_k": {k: pass_hat_k(successes, k) for k in range(1, trials + 1)},
                "flip_rate": flip_rate(successes) if trials > 1 else None,
                "task_flip_rates": flip_rate_per_task(successes).tolist() if trials > 1 else None,
                "mixed_tasks": mixed_share(successes) if trials > 1 else None,
            }
        )
    per_cell = {(r.agent, r.simulator): np.asarray(r.successes).mean(axis=1) for r in results}
    held_out = {
        agent: [s for (a, s) in per_cell if a == agent and s not in training.get(agent, [])]
        for agent in dict.fromkeys(r.agent for r in results)
    }
    tasks = len(results[0].successes) if results else 0
    agents: dict[str, dict[str, Any]] = {}
    for agent, panel in held_out.items():
        per_task = np.mean([per_cell[(agent, s)] for s in panel], axis=0) if panel else None
        agents[agent] = {
            "panel": bootstrap_interval(per_task, seed=seed).as_dict() if panel else None,
            "held_out": panel,
            "training": list(training.get(agent, [])),
            # against a second agent as spread as this one, tasks independent of it (no pairing gain)
            "mde": minimum_detectable_difference(float(np.std(per_task, ddof=1)) * np.sqrt(2), tasks)
            if panel and tasks > 1
            else None,
        }
    pairs, shared = [], []
    for a, b in itertools.combinations(held_out, 2):
        common = [s for s in held_out[a] if s in held_out[b]]
        if not common:
            continue
        first = np.mean([per_cell[(a, s)] for s in common], axis=0)
        second = np.mean([per_cell[(b, s)] for s in common], axis=0)
        pairs.append(paired_comparison(first, second, names=(a, b), seed=seed))
        differences = first - second
        sd = float(np.std(differences, ddof=1)) if len(differences) > 1 else 0.0
        shared.append({"simulators": common, "mde": minimum_detectable_difference(sd, len(differences))})
    adjusted = holm([p.p_value for p in pairs])
    comparisons = [{**p.as_dict(), "holm_p": q, **extra} for p, q, extra in zip(pairs, adjusted, shared)]
    return {
        "cells": cells,
        "agents": agents,
        "comparisons": comparisons,
        "tasks": tasks,
        "trials": trials,
        "alpha": ALPHA,
        "power": POWER,
    }


def _estimate(value: dict[str, float] | None) -> str:
    return "-" if value is None else f"{value['value']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"


def markdown(summary: dict[str, Any], settings: EvalSettings) -> str:
    agents = list(summary["agents"])
    simulators = list(dict.fromkeys(c["simulator"] for c in summary["cells"]))
    cell = {(c["agent"], c["simulator"]): c for c in summary["cells"]}
    alpha, power = summary["alpha"], summary["power"]

    def shown(agent: str, simulator: str) -> str:
        if (agent, simulator) not in cell:
            return "-"
        text = _estimate(cell[(agent, simulator)]["success"])
        return f"{text} (T)" if cell[(agent, simulator)]["training"] else text

    lines = [
        f"# Cross-play evaluation on {settings.env}",
        "",
        f"{settings.tasks} tasks of the {settings.split} split (seed {settings.seed}) x {settings.trials} trials per "
        "cell. Success with bootstrap 95% intervals over tasks. (T): a simulator the agent trained against (read "
        "from its run's config), left out of its panel. Held-out panel: each task's success averaged over the "
        "agent's held-out simulators.",
        "",
        "## Success",
        "",
        "| agent | " + " | ".join(simulators) + " | held-out panel | trained against |",
        "|---|" + "---|" * (len(simulators) + 2),
    ]
    for agent in agents:
        row = [shown(agent, s) for s in simulators]
        info = summary["agents"][agent]
        panel = _estimate(info["panel"]) if info["panel"] else "- (no held-out simulator)"
        trained = ", ".join(info["training"]) or "-"
        lines.append(f"| {agent} | " + " | ".join(row) + f" | {panel} | {trained} |")
    ks = range(1, settings.trials + 1)
    lines += [
        "",
        "## Reward, pass^k and flips",
        "",
        "Flip rate: the chance that a task's outcome differs between two identical runs, 2c(n-c)/(n(n-1)) for c "
        "successes in n trials, averaged over tasks; mixed: the share of tasks whose trials do not all agree.",
        "",
        "| agent | simulator | reward | " + " | ".join(f"pass^{k}" for k in ks) + " | flip rate | mixed |",
        "|---|---|---|" + "---|" * (len(ks) + 2),
    ]
    for c in summary["cells"]:
        passes = " | ".join(f"{c['pass_k'][k]:.3f}" for k in ks)
        flips = "- | -" if c["flip_rate"] is None else f"{c['flip_rate']:.3f} | {c['mixed_tasks']:.3f}"
        label = f"{c['simulator']} (T)" if c["training"] else c["simulator"]
        lines.append(f"| {c['agent']} | {label} | {_estimate(c['reward'])} | {passes} | {flips} |")
    lines += [
        "",
        f"## Minimum detectable difference ({summary['tasks']} tasks x {summary['trials']} trials)",
        "",
        f"The smallest true difference in held-out panel success that a two-sided test at alpha = {alpha} detects "
        f"with power {power} (normal approximation, (z(1-alpha/2) + z(power)) sd / sqrt(tasks)). Per agent: against "
        "another agent as spread as this one, tasks not paired (sd of the difference = sqrt(2) x this agent's sd "
        "over tasks); per pair below: from the observed sd of the paired differences.",
        "",
        "| agent | MDE |",
        "|---|---|",
    ]
    for agent in agents:
        mde = summary["agents"][agent]["mde"]
        lines.append(f"| {agent} | {'-' if mde is None else f'{mde:.3f}'} |")
    if summary["comparisons"]:
        lines += [
            "",
            "## Paired comparisons (same tasks, success over the simulators held out from both)",
            "",
            "| a | b | simulators | a - b [95% CI] | MDE | Wilcoxon p | Holm p |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in summary["comparisons"]:
            difference = {k: p[k] for k in ("value", "low", "high")}
            lines.append(
                f"| {p['a']} | {p['b']} | {', '.join(p['simulators'])} | {_estimate(difference)} | {p['mde']:.3f} "
                f"| {p['p_value']:.3g} | {p['holm_p']:.3g} |"
            )
    lines += ["", "![success of each agent against each simulator](heatmap.png)", ""]
    return "\n".join(lines)


def heatmap(summary: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = list(summary["agents"])
    simulators = list(dict.fromkeys(c["simulator"] for c in summary["cells"]))
    values = np.full((len(agents), len(simulators)), np.nan)
    trained = np.zeros(values.shape, dtype=bool)
    for c in summary["cells"]:
        values[agents.index(c["agent"]), simulators.index(c["simulator"])] = c["success"]["value"]
        trained[agents.index(c["agent"]), simulators.index(c["simulator"])] = c["training"]
    figure, axis = plt.subplots(figsize=(1.6 + 1.5 * len(simulators), 1.2 + 0.55 * len(agents)))
    image = axis.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        if np.isfinite(value):
            text = f"{value:.2f} (T)" if trained[row, column] else f"{value:.2f}"
            axis.text(column, row, text, ha="center", va="center", color="white" if value < 0.6 else "black")
    axis.set_xticks(range(len(simulators)), simulators, rotation=30, ha="right", fontsize=8)
    axis.set_yticks(range(len(agents)), agents, fontsize=8)
    axis.set_xlabel("simulator   ((T): trained against it, not in the held-out panel)")
    axis.set_ylabel("agent")
    figure.colorbar(image, ax=axis, label="success")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def evaluate(
    settings: EvalSettings, agent_specs: list[str], simulator_specs: list[str], out: Path, *, progress: bool = True
) -> Path:
    """Plays (or reads) every cell and writes the report; the path of `evaluation.md`."""
    settings.validate()
    env = find_env(settings.env).make(**settings.env_kwargs)
    partner = USER if settings.side == AGENT else AGENT
    agents = [build_agent(spec, env, settings.side) for spec in agent_specs]
    simulators = [player for spec in simulator_specs for player in build_simulators(spec, env, partner)]
    for kind, players in (("agent", agents), ("simulator", simulators)):
        labels = [p.label for p in players]
        if len(set(labels)) != len(labels):
            raise ValueError(f"two {kind}s have the same label: {labels}")
    results = run_cells(settings, agents, simulators, out, progress=progress)
    summary = summarize(results, settings.trials, seed=settings.seed, training=training_cells(agents, simulators))
    heatmap(summary, out / "heatmap.png")
    (out / "evaluation.json").write_text(json.dumps(summary, indent=1))
    path = out / "evaluation.md"
    path.write_text(markdown(summary, settings))
    return path


def tasks_argument(text: str) -> int | str:
    if text == ALL_TASKS:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or {ALL_TASKS!r}, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="the environment (`scope envs` lists them)")
    parser.add_argument("--agents", nargs="+", required=True, help="run folders or policy specs")
    parser.add_argument(
        "--simulators", nargs="+", required=True, help="policy specs, vs:SPEC / vsK:SPEC, run folders, pool:RUN"
    )
    parser.add_argument(
        "--tasks",
        type=tasks_argument,
        default=50,
        help="tasks in the fixed task set (50), or all: every task of the split once",
    )
    parser.add_argument("--trials", type=int, default=4, help="trials per task, M: pass^k for k = 1..M (4)")
    parser.add_argument("--split", default="test", help="the split tasks are drawn from (test)")
    parser.add_argument("--seed", type=int, default=0, help="picks the task set and seeds the episodes (0)")
    parser.add_argument("--side", default=AGENT, choices=[AGENT, USER], help="the side the agents play (agent)")
    add_env_arg(parser)
    parser.add_argument("--out", default="runs/evaluate", help="output folder; cells are cached there")


def run(args: argparse.Namespace) -> int:
    try:
        import scipy  # noqa: F401
    except ImportError:
        print(needs_extra("scope evaluate", "scipy", "evaluate"), file=sys.stderr)
        return 2
    settings = EvalSettings(args.env, args.tasks, args.trials, args.split, args.seed, args.side, env_kwargs_of(args))
    try:
        report = evaluate(settings, args.agents, args.simulators, Path(args.out))
    except (ValueError, RunError) as error:
        return failed(args, error)
    print(report.read_text())
    print(f"report: {report}\nheatmap: {report.parent / 'heatmap.png'}\njson: {report.parent / 'evaluation.json'}")
    return 0
