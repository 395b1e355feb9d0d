"""`scope fidelity`: how much a simulator's conversations resemble people's, and how collapsed it is.

Each simulator plays the simulated side (the user by default) of the same scenarios against
one agent policy (the env's scripted one by default). Where the benchmark registered human
reference data (`register_dialogue_env(..., human_reference=...)`), the scenarios are those of
the recorded human conversations, and the report compares the simulator with the people on
them: the outcome distribution (stated against stated; actual against actual where the env
records it) and per-conversation turn length, each as Wasserstein-1 with a bootstrap interval
beside the people's split-half floor; the distribution of dialogue acts (Jensen-Shannon distance)
beside the people's split-half distance and the act tagger's own floor (the tagger's turn-level
agreement with human labels is reported); lexical diversity (also at one sample size for all
rows) and diversity across personas. Without human data
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

from baselines.arguments import add_env_arg, env_kwargs_of, failed
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
    from scope_envs.core.episodes import run_episodes

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
    from baselines.apps.evaluate import build_simulators
    from sims.fidelity import compare, diversity, word_count

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
        "actual_outcome": reference.actual_outcome if reference is not None else None,
        "tagger": reference.act_quality if reference is not None else None,
        "rows": [],
    }
    played: list[tuple[str, list[list[str]], list[dict[str, Any]]]] = []
    if reference is not None:
        human = reference.conversations
        played.append(("people", [list(c.turns) for c in human], []))
        both = [(c.outcome, c.actual) for c in human if c.outcome is not None and c.actual is not None]
        report["people_stated_is_actual"] = (
            {"share": sum(abs(s - a) < 1e-9 for s, a in both) / len(both), "dialogues": len(both)} if both else None
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
            played.append((player.label, turns, components))
    # distinct-n falls as a sample grows: every row is also measured at the smallest row's size
    words = min(sum(word_count(t) for c in turns for t in c) for _, turns, _ in played)
    report["equal_words"] = words
    for label, turns, components in played:
        row: dict[str, Any] = {
            "simulator": label,
            "diversity": diversity(turns, act_of, equal_words=words or None, seed=seed).as_dict(),
        }
        if reference is None:
            report["rows"].append(row)
            continue
        if label == "people":
            row["outcome_mean"] = _mean([c.outcome for c in reference.conversations])
            row["actual_mean"] = _mean([c.actual for c in reference.conversations])
            report["rows"].append(row)
            continue
        outcomes = [c.get(reference.outcome) for c in components] if reference.outcome else []
        actual = [c.get(reference.actual_outcome) for c in components] if reference.actual_outcome else []
        row["outcome_mean"] = _mean(outcomes)
        row["fidelity"] = compare(
            turns,
            played[0][1],
            simulated_outcomes=outcomes,
            human_outcomes=[c.outcome for c in reference.conversations],
            simulated_actual=actual,
            human_actual=[c.actual for c in reference.conversations] if actual else [],
            act_of=act_of,
            tagger_floor=(reference.act_quality or {}).get("floor"),
            seed=seed,
        ).as_dict()
        report["rows"].append(row)
    return report


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _gap(gap: dict[str, Any] | None, digits: int = 3) -> str:
    if not gap:
        return "- | -"
    return (
        f"{gap['wasserstein']:.{digits}f} [{gap['low']:.{digits}f}, {gap['high']:.{digits}f}] "
        f"(n {gap['n_simulated']} / {gap['n_human']}) | {gap['human_floor']:.{digits}f}"
    )


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Simulator fidelity on {report['env']} ({report['side']} side)",
        "",
        f"{report['conversations']} conversations of the {report['split']} split against the `{report['agent']}` "
        f"agent. Human reference: {report['reference'] or 'none registered for this env (diversity only)'}.",
    ]
    tagger = report.get("tagger")
    if tagger:
        f1 = ", ".join(f"{act} {value:.2f}" for act, value in sorted(tagger["f1"].items()))
        lines += [
            "",
            "## The act tagger, at the unit it labels (a turn)",
            "",
            f"Against the human annotation of {tagger['units']} turns: accuracy {tagger['accuracy']:.3f} (always the "
            f"most frequent act: {tagger['majority']:.3f}), Cohen's kappa {tagger['kappa']:.3f}; F1 per act: {f1}. "
            f"Its floor: the JS distance between the act shares it reports and the annotators' is "
            f"{tagger['floor']:.3f}; act distances of that size can be the tagger's error alone.",
        ]
    lines += [
        "",
        f"## Diversity (higher = more varied; entropies in bits; distinct-n also at {report['equal_words']} words)",
        "",
        "distinct-n falls as a sample grows, so the @words columns compare every row at the smallest row's size "
        "(whole turns drawn at random, 20 draws averaged).",
        "",
        "| simulator | turns | words/turn | distinct-1 | distinct-2 | distinct-1 @words | distinct-2 @words | "
        "first-reply entropy | unique first replies | first-reply cluster entropy | first-act entropy | act entropy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        d = row["diversity"]
        lines.append(
            f"| {row['simulator']} | {d['turns_per_conversation']:.1f} | {d['words_per_turn']:.1f} | "
            f"{d['distinct_1']:.3f} | {d['distinct_2']:.3f} | {_number(d['distinct_1_equal'])} | "
            f"{_number(d['distinct_2_equal'])} | {d['first_reply_entropy']:.2f} | "
            f"{d['first_reply_unique_share']:.2f} | {d['first_reply_cluster_entropy']:.2f} | "
            f"{_number(d['first_act_entropy'], 2)} | {_number(d['act_entropy'], 2)} |"
        )
    compared = [row for row in report["rows"] if "fidelity" in row]
    if compared:
        outcome = report["outcome"]
        people = report["rows"][0]
        agreement = report.get("people_stated_is_actual")
        lines += [
            "",
            "## Against the people (lower distance = closer)",
            "",
            f"Wasserstein-1 distances with a bootstrap 95% interval (both samples resampled, 1000 times) and n "
            "simulated / human; floor: the people's own split-half distance (two random halves of the human "
            "sample, averaged), the distance below which a simulator is as close to people as people are to each "
            f"other. {outcome}: the amount stated in the conversation, against what people stated where the corpus "
            f"annotates it (people: mean {_number(people.get('outcome_mean'))}). Actual {outcome}: "
            + (
                "compared where the env records it."
                if report.get("actual_outcome")
                else f"not compared, as the env records only what a simulator states (people: mean actual "
                f"{_number(people.get('actual_mean'))})."
            )
            + (
                f" People's stated and actual amounts agree in {agreement['share']:.0%} of the "
                f"{agreement['dialogues']} dialogues with both."
                if agreement
                else ""
            )
            + " Turn length: each conversation's mean words per turn (turns of one conversation are not "
            "independent). Acts: JS distance of act shares over turns, beside the people's split-half distance and "
            "the tagger's floor.",
            "",
            f"| simulator | mean stated {outcome} | stated {outcome} W1 [95% CI] | floor | actual {outcome} W1 "
            "| floor | words/turn W1 [95% CI] | floor | act JS | people split-half | tagger floor |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in compared:
            f = row["fidelity"]
            acts = f["acts"] or {}
            lines.append(
                f"| {row['simulator']} | {_number(row['outcome_mean'])} | {_gap(f['outcome'])} | {_gap(f['actual'])} "
                f"| {_gap(f['length'], 2)} | {_number(acts.get('distance'))} | {_number(acts.get('human_floor'))} "
                f"| {_number(acts.get('tagger_floor'))} |"
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
    add_env_arg(parser)
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
    try:
        report = fidelity_report(
            args.env,
            args.simulators,
            side=args.side,
            agent=args.agent,
            conversations=args.conversations,
            split=args.split,
            seed=args.seed,
            env_kwargs=env_kwargs_of(args),
        )
    except ValueError as error:
        return failed(args, error)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(json.dumps(report, indent=1))
    path = out / "fidelity.md"
    path.write_text(markdown(report))
    print(path.read_text())
    print(f"report: {path}\njson: {out / 'fidelity.json'}")
    return 0
