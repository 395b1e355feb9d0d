"""`scope evaluate`: cross-play of agents against a panel of simulators, with pass^k and intervals.

Every agent plays every simulator on one fixed task set: task t is the scenario the env's own
`reset` picks from `derive_seed(seed, t)` on the chosen split, the same for every cell, and each
task is played `trials` times. Each (agent, simulator) cell is played through the env's rollout
(its vectorized one where it has one, else chat episodes) and cached as JSON under
`<out>/cells/`, keyed by everything that determines it, so an interrupted evaluation resumes and a
repeated one costs nothing.

Agents: a run folder (`config.yaml` and `checkpoints/`: the trained side of its newest intact
checkpoint), or a policy spec (`scripted`, `linear`, `family:3`, `openai:MODEL`, ...).
Simulators: a policy spec; `vs:SPEC` or `vsK:SPEC` (Verbalized Sampling with k candidates,
5 by default); a run folder of a co-training run (its trained simulator); `pool:RUN` (every
snapshot in the run's simulator pool, one simulator each).

Reported per cell: success and reward with bootstrap 95% intervals over tasks, and pass^k for
k = 1..trials (Yao et al. 2024, `baselines.stats.pass_hat_k`); per agent, success over
the whole panel; between every two agents, the paired difference on the same tasks (bootstrap
interval, Wilcoxon signed-rank p, Holm-adjusted over the pairs). Written: `evaluation.md`,
`evaluation.json` and `heatmap.png` (agents x simulators).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.extras import needs_extra
from scope_envs.core.registration import find_env
from scope_envs.core.rollout import RolloutGroup, collect_chat
from scope_envs.core.seeding import derive_seed

VS_PREFIX = re.compile(r"^vs([0-9]*):(.+)$")
POOL_PREFIX = "pool:"
DEFAULT_VS_K = 5


@dataclass
class Player:
    """A policy in the cross-play, its label in the report, and what identifies it for the cache."""

    label: str
    policy: Any
    identity: str


@dataclass
class CellResult:
    agent: str
    simulator: str
    scenario_ids: list[str]
    successes: list[list[float]]  # [tasks][trials]
    rewards: list[list[float]]
    key: dict[str, Any] = field(default_factory=dict)


# ---- who plays -----------------------------------------------------------------------------------


def is_run(path: str) -> bool:
    return (Path(path) / "config.yaml").is_file()


def load_run(path: str | Path) -> Any:
    """The trainer of a run, at its newest intact checkpoint (an error if it has none)."""
    from baselines.config import load_config
    from baselines.trainer import Trainer

    folder = Path(path)
    if not is_run(str(folder)):
        raise ValueError(f"{folder} is not a run folder: it has no config.yaml")
    trainer = Trainer(load_config(folder / "config.yaml", [f"output_dir={folder}"]))
    if trainer.load_latest() is None:
        raise ValueError(f"{folder} holds no checkpoint to evaluate")
    return trainer


def _checkpoint_identity(trainer: Any) -> str:
    latest = trainer.checkpoints / (trainer.checkpoints / "latest").read_text().strip()
    manifest = (latest / "manifest.json").read_bytes() if (latest / "manifest.json").is_file() else b""
    return f"{Path(trainer.output).resolve()}:{latest.name}:{hashlib.sha256(manifest).hexdigest()[:16]}"


def build_agent(spec: str, env: Any, side: str = AGENT) -> Player:
    """An agent: the trained side of a run folder, or a policy spec."""
    if is_run(spec):
        trainer = load_run(spec)
        if side not in trainer.learners:
            raise ValueError(f"{spec}: the run trained the {trainer.side!r} side, not {side!r}")
        return Player(Path(spec).name, trainer.learners[side].policy, f"run:{_checkpoint_identity(trainer)}:{side}")
    return Player(spec, _policy(spec, env, side), f"spec:{spec}")


def build_simulators(spec: str, env: Any, side: str = USER) -> list[Player]:
    """The simulators a `--simulators` item stands for (a pool stands for several)."""
    from sims.verbalized import verbalize

    vs = VS_PREFIX.match(spec)
    if vs:
        k = int(vs.group(1) or DEFAULT_VS_K)
        inner = build_simulators(vs.group(2), env, side)
        return [Player(f"vs{k}({p.label})", verbalize(p.policy, k=k), f"vs{k}:{p.identity}") for p in inner]
    if spec.startswith(POOL_PREFIX):
        trainer = load_run(spec.removeprefix(POOL_PREFIX))
        if trainer.pool is None or not trainer.pool.members:
            raise ValueError(f"{spec}: the run has no simulator pool (only population runs keep one)")
        name = Path(trainer.output).name
        return [
            Player(f"{name}@{m.step}", trainer.pool.load(m), f"pool:{Path(trainer.output).resolve()}:{m.id}:{m.step}")
            for m in trainer.pool.members
        ]
    if is_run(spec):
        player = build_agent(spec, env, side)
        return [Player(f"{player.label}:{side}", player.policy, player.identity)]
    return [Player(spec, _policy(spec, env, side), f"spec:{spec}")]


def _policy(spec: str, env: Any, side: str) -> Any:
    """A policy spec: a registered backend (`make_policy`), else a trainable model or act policy
    at its initial weights (`linear`, `tiny`, `hf:...`)."""
    from baselines.policy import build_policy
    from scope_envs.core.specs import make_policy, policy_backends, split_spec

    if spec == "scripted" or split_spec(spec)[0] in ("scripted", *policy_backends()):
        return make_policy(spec, env=env, side=side)
    return build_policy(spec, temperature=1.0, max_new_tokens=256, device=None, lora=None, seed=0, env=env, side=side)


# ---- playing the cells ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSettings:
    env: str
    tasks: int = 50
    trials: int = 4
    split: str = "test"
    seed: int = 0
    side: str = AGENT
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> EvalSettings:
        if self.tasks < 1 or self.trials < 1:
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


def play_cell(settings: EvalSettings, agent: Player, simulator: Player) -> CellResult:
    """`tasks` x `trials` episodes of one agent against one simulator."""
    info = find_env(settings.env)
    rollout = info.rollout_function() or collect_chat
    partner = USER if settings.side == AGENT else AGENT
    players = {settings.side: agent.policy, partner: simulator.policy}
    groups = [RolloutGroup(derive_seed(settings.seed, task), players) for task in range(settings.tasks)]
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


def summarize(results: list[CellResult], trials: int, seed: int = 0) -> dict[str, Any]:
    """Per cell, per agent and per pair of agents: the numbers of the report."""
    from baselines.stats import bootstrap_interval, holm, paired_comparison, pass_hat_k

    cells = []
    for r in results:
        successes, rewards = np.asarray(r.successes), np.asarray(r.rewards)
        cells.append(
            {
                "agent": r.agent,
                "simulator": r.simulator,
                "success": bootstrap_interval(successes.mean(axis=1), seed=seed).as_dict(),
                "reward": bootstrap_interval(rewards.mean(axis=1), seed=seed).as_dict(),
                "pass_k": {k: pass_hat_k(successes, k) for k in range(1, trials + 1)},
            }
        )
    per_task: dict[str, np.ndarray] = {}
    for agent in dict.fromkeys(r.agent for r in results):
        mine = [np.asarray(r.successes).mean(axis=1) for r in results if r.agent == agent]
        per_task[agent] = np.mean(mine, axis=0)  # each task's success over the whole panel
    agents = {a: bootstrap_interval(v, seed=seed).as_dict() for a, v in per_task.items()}
    pairs = [
        paired_comparison(per_task[a], per_task[b], names=(a, b), seed=seed)
        for a, b in itertools.combinations(per_task, 2)
    ]
    adjusted = holm([p.p_value for p in pairs])
    comparisons = [{**p.as_dict(), "holm_p": q} for p, q in zip(pairs, adjusted)]
    return {"cells": cells, "agents": agents, "comparisons": comparisons}


def _estimate(value: dict[str, float]) -> str:
    return f"{value['value']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"


def markdown(summary: dict[str, Any], settings: EvalSettings) -> str:
    agents = list(summary["agents"])
    simulators = list(dict.fromkeys(c["simulator"] for c in summary["cells"]))
    cell = {(c["agent"], c["simulator"]): c for c in summary["cells"]}
    lines = [
        f"# Cross-play evaluation on {settings.env}",
        "",
        f"{settings.tasks} tasks of the {settings.split} split (seed {settings.seed}) x {settings.trials} trials per "
        "cell. Success with bootstrap 95% intervals over tasks; panel: each task's success averaged over simulators.",
        "",
        "## Success",
        "",
        "| agent | " + " | ".join(simulators) + " | panel |",
        "|---|" + "---|" * (len(simulators) + 1),
    ]
    for agent in agents:
        row = [_estimate(cell[(agent, s)]["success"]) if (agent, s) in cell else "-" for s in simulators]
        lines.append(f"| {agent} | " + " | ".join(row) + f" | {_estimate(summary['agents'][agent])} |")
    ks = range(1, settings.trials + 1)
    lines += [
        "",
        "## Reward and pass^k",
        "",
        "| agent | simulator | reward | " + " | ".join(f"pass^{k}" for k in ks) + " |",
        "|---|---|---|" + "---|" * len(ks),
    ]
    for c in summary["cells"]:
        passes = " | ".join(f"{c['pass_k'][k]:.3f}" for k in ks)
        lines.append(f"| {c['agent']} | {c['simulator']} | {_estimate(c['reward'])} | {passes} |")
    if summary["comparisons"]:
        lines += [
            "",
            "## Paired comparisons (same tasks, success over the panel)",
            "",
            "| a | b | a - b [95% CI] | Wilcoxon p | Holm p |",
            "|---|---|---|---|---|",
        ]
        for p in summary["comparisons"]:
            difference = {k: p[k] for k in ("value", "low", "high")}
            lines.append(f"| {p['a']} | {p['b']} | {_estimate(difference)} | {p['p_value']:.3g} | {p['holm_p']:.3g} |")
    lines += ["", "![success of each agent against each simulator](heatmap.png)", ""]
    return "\n".join(lines)


def heatmap(summary: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = list(summary["agents"])
    simulators = list(dict.fromkeys(c["simulator"] for c in summary["cells"]))
    values = np.full((len(agents), len(simulators)), np.nan)
    for c in summary["cells"]:
        values[agents.index(c["agent"]), simulators.index(c["simulator"])] = c["success"]["value"]
    figure, axis = plt.subplots(figsize=(1.6 + 1.5 * len(simulators), 1.2 + 0.55 * len(agents)))
    image = axis.imshow(values, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        if np.isfinite(value):
            axis.text(column, row, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.6 else "black")
    axis.set_xticks(range(len(simulators)), simulators, rotation=30, ha="right", fontsize=8)
    axis.set_yticks(range(len(agents)), agents, fontsize=8)
    axis.set_xlabel("simulator")
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
    summary = summarize(results, settings.trials, seed=settings.seed)
    heatmap(summary, out / "heatmap.png")
    (out / "evaluation.json").write_text(json.dumps(summary, indent=1))
    path = out / "evaluation.md"
    path.write_text(markdown(summary, settings))
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="the environment (`scope envs` lists them)")
    parser.add_argument("--agents", nargs="+", required=True, help="run folders or policy specs")
    parser.add_argument(
        "--simulators", nargs="+", required=True, help="policy specs, vs:SPEC / vsK:SPEC, run folders, pool:RUN"
    )
    parser.add_argument("--tasks", type=int, default=50, help="tasks in the fixed task set (50)")
    parser.add_argument("--trials", type=int, default=4, help="trials per task, M: pass^k for k = 1..M (4)")
    parser.add_argument("--split", default="test", help="the split tasks are drawn from (test)")
    parser.add_argument("--seed", type=int, default=0, help="picks the task set and seeds the episodes (0)")
    parser.add_argument("--side", default=AGENT, choices=[AGENT, USER], help="the side the agents play (agent)")
    parser.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=VALUE", help="a constructor argument of the env"
    )
    parser.add_argument("--out", default="runs/evaluate", help="output folder; cells are cached there")


def run(args: argparse.Namespace) -> int:
    try:
        import scipy  # noqa: F401
    except ImportError:
        print(needs_extra("scope evaluate", "scipy", "evaluate"), file=sys.stderr)
        return 2
    from baselines.cli import _key_value

    env_kwargs = dict(_key_value(item) for item in args.env_arg)
    settings = EvalSettings(args.env, args.tasks, args.trials, args.split, args.seed, args.side, env_kwargs)
    from baselines.trainer import RunError

    try:
        report = evaluate(settings, args.agents, args.simulators, Path(args.out))
    except (ValueError, RunError) as error:
        print(f"scope evaluate: {error}", file=sys.stderr)
        return 2
    print(report.read_text())
    print(f"report: {report}\nheatmap: {report.parent / 'heatmap.png'}\njson: {report.parent / 'evaluation.json'}")
    return 0
