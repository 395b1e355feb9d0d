"""`scope fidelity`: how much a simulator's conversations resemble people's, and how collapsed it is.

Each simulator plays the simulated side (the user by default) of the same scenarios against
one agent policy (the env's scripted one by default). Where the benchmark registered human
reference data (`register_dialogue_env(..., human_reference=...)`), the scenarios are those of
the recorded human conversations, and the report compares the simulator with the people on
them: the outcome distribution (Wasserstein, KS), turn length, the distribution of dialogue acts
(Jensen-Shannon distance), lexical diversity and diversity across personas. Without human data
the report gives the diversity part for the env's scenarios. The people's own diversity is a row
of the same table, so "how collapsed" reads against the human level.

Simulators are named as for `scope evaluate`: policy specs, `vs:SPEC`, run folders (a co-trained
simulator), `pool:RUN`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scope_envs.core.dialogue import AGENT, USER
from scope_envs.core.extras import needs_extra
from scope_envs.core.registration import find_env
from scope_envs.core.seeding import derive_seed


def simulated_conversations(
    env_name: str,
    simulator: Any,
    *,
    side: str,
    agent: Any,
    task_ids: list[str] | None,
    count: int,
    split: str,
    seed: int,
    env_kwargs: dict[str, Any],
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The simulated side's turns in each episode, and each episode's reward components for it."""
    from scope_envs.core.batch import run_episodes

    info = find_env(env_name)
    n = len(task_ids) if task_ids is not None else count
    envs = [info.make(**env_kwargs) for _ in range(n)]
    options = [{"task_id": t} for t in task_ids] if task_ids is not None else [{"split": split}] * n
    other = AGENT if side == USER else USER
    results = run_episodes(
        envs, {side: simulator, other: agent}, seeds=[derive_seed(seed, i) for i in range(n)], options=options
    )
    for env in envs:
        env.close()
    turns = [[m["content"] or "" for m in r.messages[side] if m["role"] == "assistant"] for r in results]
    components = [r.reward_info.get(side, {}).get("components", {}) for r in results]
    return turns, components


def fidelity_report(
    env_name: str,
    simulator_specs: list[str],
    *,
    side: str = USER,
    agent: str = "scripted",
    conversations: int = 100,
    split: str = "test",
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fidelity and diversity numbers of each simulator (and of the people, where known)."""
    from baselines.evaluate import build_simulators
    from sims.fidelity import compare, diversity

    env_kwargs = env_kwargs or {}
    info = find_env(env_name)
    env = info.make(**env_kwargs)
    loader = info.human_reference_function()
    reference = loader(env, split=split, limit=conversations) if loader is not None else None
    if reference is not None and reference.side != side:
        reference = None  # people played the other side: nothing to compare this side with
    act_of = reference.act_of if reference is not None else None
    task_ids = [c.task_id for c in reference.conversations] if reference is not None else None
    report: dict[str, Any] = {
        "env": env_name,
        "side": side,
        "agent": agent,
        "split": split,
        "conversations": len(task_ids) if task_ids is not None else conversations,
        "reference": reference.source if reference is not None else None,
        "outcome": reference.outcome if reference is not None else None,
        "rows": [],
    }
    if reference is not None:
        human_turns = [list(c.turns) for c in reference.conversations]
        report["rows"].append(
            {
                "simulator": "people",
                "diversity": diversity(human_turns, act_of).as_dict(),
                "outcome_mean": _mean([c.outcome for c in reference.conversations]),
            }
        )
    for spec in simulator_specs:
        for player in build_simulators(spec, env, side):
            if not hasattr(player.policy, "respond"):
                raise ValueError(
                    f"{player.label} answers with act indices, not text (it has no respond()): fidelity compares "
                    "conversations as text; `scope evaluate` plays it"
                )
            turns, components = simulated_conversations(
                env_name,
                player.policy,
                side=side,
                agent=agent,
                task_ids=task_ids,
                count=conversations,
                split=split,
                seed=seed,
                env_kwargs=env_kwargs,
            )
            row: dict[str, Any] = {"simulator": player.label, "diversity": diversity(turns, act_of).as_dict()}
            if reference is not None:
                outcomes = [c.get(reference.outcome) for c in components] if reference.outcome else []
                row["outcome_mean"] = _mean(outcomes)
                row["fidelity"] = compare(
                    turns,
                    human_turns,
                    simulated_outcomes=outcomes,
                    human_outcomes=[c.outcome for c in reference.conversations],
                    act_of=act_of,
                ).as_dict()
            report["rows"].append(row)
    return report


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Simulator fidelity on {report['env']} ({report['side']} side)",
        "",
        f"{report['conversations']} conversations of the {report['split']} split against the `{report['agent']}` "
        f"agent. Human reference: {report['reference'] or 'none registered for this env (diversity only)'}.",
        "",
        "## Diversity (higher = more varied; entropies in bits)",
        "",
        "| simulator | turns | words/turn | distinct-1 | distinct-2 | first-reply entropy | unique first replies "
        "| first-reply cluster entropy | first-act entropy | act entropy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        d = row["diversity"]
        lines.append(
            f"| {row['simulator']} | {d['turns_per_conversation']:.1f} | {d['words_per_turn']:.1f} | "
            f"{d['distinct_1']:.3f} | {d['distinct_2']:.3f} | {d['first_reply_entropy']:.2f} | "
            f"{d['first_reply_unique_share']:.2f} | {d['first_reply_cluster_entropy']:.2f} | "
            f"{_number(d['first_act_entropy'], 2)} | {_number(d['act_entropy'], 2)} |"
        )
    compared = [row for row in report["rows"] if "fidelity" in row]
    if compared:
        outcome = report["outcome"]
        lines += [
            "",
            f"## Against the people (lower distance = closer; {outcome} and turn length in words)",
            "",
            f"| simulator | mean {outcome} (people {_number(report['rows'][0]['outcome_mean'])}) | "
            f"{outcome} Wasserstein | {outcome} KS (p) | length Wasserstein | length KS (p) | act JS distance |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in compared:
            f = row["fidelity"]
            o, n = f["outcome"], f["length"]
            outcome_cells = (
                f"{o['wasserstein']:.3f} | {o['ks_statistic']:.3f} ({o['ks_p_value']:.2g})" if o else "- | -"
            )
            lines.append(
                f"| {row['simulator']} | {_number(row['outcome_mean'])} | {outcome_cells} | {n['wasserstein']:.2f} | "
                f"{n['ks_statistic']:.3f} ({n['ks_p_value']:.2g}) | {_number(f['act_js_distance'])} |"
            )
    acts = [row for row in report["rows"] if row["diversity"].get("acts")]
    if acts:
        names = sorted({a for row in acts for a in row["diversity"]["acts"]})
        lines += ["", "## Dialogue acts (share of turns)", "", "| simulator | " + " | ".join(names) + " |"]
        lines.append("|---|" + "---|" * len(names))
        for row in acts:
            shares = row["diversity"]["acts"]
            lines.append(f"| {row['simulator']} | " + " | ".join(f"{shares.get(a, 0.0):.2f}" for a in names) + " |")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("simulators", nargs="+", help="simulator specs, vs:SPEC, run folders, pool:RUN")
    parser.add_argument("--env", required=True, help="the environment (`scope envs` lists them)")
    parser.add_argument("--side", default=USER, choices=[AGENT, USER], help="the side simulated (user)")
    parser.add_argument("--agent", default="scripted", help="the policy playing the other side (scripted)")
    parser.add_argument("--conversations", type=int, default=100, help="conversations per simulator (100)")
    parser.add_argument("--split", default="test", help="the split of the scenarios (test)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=VALUE", help="a constructor argument of the env"
    )
    parser.add_argument("--out", default="runs/fidelity", help="output folder (fidelity.md, fidelity.json)")


def run(args: argparse.Namespace) -> int:
    try:
        import scipy  # noqa: F401
    except ImportError:
        print(needs_extra("scope fidelity", "scipy", "evaluate"), file=sys.stderr)
        return 2
    if args.conversations < 1:
        print("scope fidelity: --conversations must be at least 1", file=sys.stderr)
        return 2
    from baselines.cli import _key_value

    env_kwargs = dict(_key_value(item) for item in args.env_arg)
    try:
        report = fidelity_report(
            args.env,
            args.simulators,
            side=args.side,
            agent=args.agent,
            conversations=args.conversations,
            split=args.split,
            seed=args.seed,
            env_kwargs=env_kwargs,
        )
    except ValueError as error:
        print(f"scope fidelity: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(json.dumps(report, indent=1))
    path = out / "fidelity.md"
    path.write_text(markdown(report))
    print(path.read_text())
    print(f"report: {path}\njson: {out / 'fidelity.json'}")
    return 0
