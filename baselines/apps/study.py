"""The pre-registered collapse study of the `collapse_v1` study config (docs/study/v1/preregistration.md).

    python -m baselines.apps.study pilot     # the positive control at the pilot seeds, every cell
    python -m baselines.apps.study run       # every arm at the confirmatory seeds, in cells where it holds
    python -m baselines.apps.study analyze   # tests, Holm, results.md / results.json, the record of runs
    python -m baselines.apps.study verify --sample 5   # reruns recorded runs; fails on any difference

Every run is a `scope demo` run of one (cell, arm, seed), trained two processes at a time; its
outcomes and provenance (the commit, whether the tree was clean, the library versions, and the
platform: machine, the CPU code torch and numpy dispatch to, thread counts) are kept in
`<out>/<cell>/runs/<arm>-seed<seed>/final.json`, so a stopped sweep resumes where it was. A sweep
refuses to add runs made from another commit, or from a tree with uncommitted changes, to a folder
that holds runs: a study's runs come from one commit. `analyze` writes `runs.jsonl`, the record
`verify` reruns with the code of the recorded commit only, whatever the install; beside an outcome
that differs it names the entries of the provenance that differ between the record and the rerun.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from baselines.apps.demo import LABELS, DemoSettings, final_values, mean_interval, run_config
from baselines.apps.provenance import (
    provenance,
    provenance_differences,
    recorded_commit,
    refuse_mixed_commits,
    run_at_commit,
)
from baselines.training.portable import kernels_in_use, portable_pool
from baselines.training.rollouts import HELDOUT_SUCCESS

# The design, as pre-registered: cells, arms, seeds, and the decision rule's constants.
GAMMAS = (1.0, 3.0, 10.0)
SPREADS = (0.5, 1.0)
CONTROL_ARMS = ("single", "heldout")
REMEDIES = ("vs", "population")
ARMS = (*CONTROL_ARMS, *REMEDIES)
PILOT_SEEDS = tuple(range(100, 105))
SEEDS = tuple(range(10))
ALPHA = 0.05
POWER = 0.8
# The pre-registered follow-up (preregistration.md, "Follow-up"): the cell with the pilot's largest
# G, at the seeds the pilot's power analysis asks for; its own runs folder and record.
FOLLOW_UP_SEEDS = tuple(range(20, 40))
FOLLOW_UP_OUT = "runs/study-v1-followup"
FINAL = "final.json"
NOT_OUTCOMES = ("seconds", "target", "provenance")  # what a run's final.json holds beside its outcomes


@dataclass(frozen=True)
class Cell:
    gamma: float
    spread: float

    @property
    def name(self) -> str:
        return f"gamma{self.gamma:g}-spread{self.spread:g}"

    @classmethod
    def parse(cls, name: str) -> Cell:
        gamma, spread = name.removeprefix("gamma").split("-spread")
        return cls(float(gamma), float(spread))


FOLLOW_UP_CELL = Cell(10.0, 1.0)


def grid() -> list[Cell]:
    return [Cell(gamma, spread) for spread in SPREADS for gamma in GAMMAS]


def cell_settings(base: DemoSettings, cell: Cell, out: Path) -> DemoSettings:
    """The demo's settings for one cell; held-out success is measured once, at the last step."""
    return replace(base, gamma=cell.gamma, spread=cell.spread, eval_every=base.steps, out=str(out / cell.name))


# ---- provenance ----------------------------------------------------------------------------------


def check_provenance(out: Path, current: dict[str, Any]) -> None:
    """Refuses to mix: every run already under `out` must come from this commit, clean."""
    recorded = [
        (path, json.loads(path.read_text()).get("provenance", {})) for path in sorted(out.glob(f"*/runs/*/{FINAL}"))
    ]
    refuse_mixed_commits(current, recorded, "use another --out, or rerun the study")


# ---- running -------------------------------------------------------------------------------------


def _run(config: dict[str, Any], tail: int, target: str | None, made: dict[str, Any]) -> dict[str, Any]:
    from baselines.apps.demo import _train

    started = time.perf_counter()
    finals = final_values(_train(config), tail, target)
    # The kernels after training: the threads and CPU dispatch the run itself used.
    result = {
        **finals,
        "seconds": time.perf_counter() - started,
        "target": target,  # what `final_values` measured held-out success on: `verify` reruns it so
        "provenance": {**made, "platform": kernels_in_use()},
    }
    path = Path(config["output_dir"]) / FINAL
    (path.parent / "run_config.json").write_text(json.dumps(config, sort_keys=True))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    return result


def plan_runs(
    out: Path, base: DemoSettings, cells: list[Cell], arms: tuple[str, ...], seeds: tuple[int, ...]
) -> list[dict[str, Any]]:
    """The trainer configs of every (cell, arm, seed) that has no `final.json` yet."""
    todo = []
    for cell in cells:
        settings = cell_settings(base, cell, out)
        for seed in seeds:
            for arm in arms:
                config = run_config(settings, arm, seed)
                if not (Path(config["output_dir"]) / FINAL).is_file():
                    todo.append(config)
    return todo


def run_configs(todo: list[dict[str, Any]], base: DemoSettings, *, jobs: int = 2, progress: bool = True) -> int:
    from tqdm.auto import tqdm

    made = provenance()
    tail = max(base.steps // 10, 1)
    with (
        tqdm(total=len(todo), desc="study", unit="run", disable=not progress) as bar,
        portable_pool(jobs) as pool,  # the same numbers on any CPU (baselines.training.portable)
    ):
        pending = {pool.submit(_run, config, tail, run_target(config, base), made) for config in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()
                bar.update(1)
    return len(todo)


def run_target(config: dict[str, Any], base: DemoSettings) -> str | None:
    """The held-out target of a run: the first of its evaluation simulators where the study has a
    target (testbeds of one study may name theirs differently), else None (the panel is the target)."""
    return config["eval_simulators"][0] if base.target else None


def load_finals(out: Path, cell: Cell, arm: str, seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    """The finished runs of an arm in a cell, in seed order (only the seeds asked for)."""
    runs = out / cell.name / "runs"
    return [json.loads(p.read_text()) for s in seeds if (p := runs / f"{arm}-seed{s}" / FINAL).is_file()]


# ---- the positive control and the tests ----------------------------------------------------------


def confirmatory_tests() -> int:
    """How many remedy tests the confirmatory family holds at most: two remedies in every cell."""
    return len(REMEDIES) * len(grid())


def pilot_control(out: Path) -> dict[str, dict[str, float]]:
    """Per cell, from the pilot seeds: G and the MDE at the confirmatory seeds, with the family-wise
    alpha split over the most tests the family can hold (Bonferroni, as conservative as Holm's
    first step), and whether the cell qualifies for the remedy tests (G >= MDE)."""
    from baselines.apps.stats import minimum_detectable_effect, paired_t_test

    table = {}
    for cell in grid():
        single, heldout = (load_finals(out, cell, arm, PILOT_SEEDS) for arm in CONTROL_ARMS)
        if len(single) < len(PILOT_SEEDS) or len(heldout) < len(PILOT_SEEDS):
            continue
        gap = paired_t_test([h[HELDOUT_SUCCESS] for h in heldout], [s[HELDOUT_SUCCESS] for s in single])
        mde = minimum_detectable_effect(gap.sd, len(SEEDS), alpha=ALPHA / confirmatory_tests(), power=POWER)
        table[cell.name] = {
            **gap.as_dict(),
            "mde_at_confirmatory_seeds": mde,
            "qualifies": gap.difference >= mde,
            "seeds_for_mde_at_g": seeds_needed(gap.difference, gap.sd),
        }
    return table


def seeds_needed(gap: float, sd: float, limit: int = 1000) -> int | None:
    """Exploratory: the fewest seeds at which the MDE (same alpha and power) would reach `gap`."""
    from baselines.apps.stats import minimum_detectable_effect

    if gap <= 0:
        return None
    alpha = ALPHA / confirmatory_tests()
    return next((n for n in range(2, limit) if minimum_detectable_effect(sd, n, alpha=alpha, power=POWER) <= gap), None)


@dataclass(frozen=True)
class Test:
    cell: Cell
    remedy: str
    result: Any  # baselines.apps.stats.PairedTest
    adjusted_p: float = float("nan")

    @property
    def verdict(self) -> str:
        if not self.adjusted_p < ALPHA:
            return "no detectable effect"
        return "helps" if self.result.difference > 0 else "hurts"


def remedy_tests(out: Path, cells: list[Cell]) -> list[Test]:
    """H1 (VS) and H2 (Population) against single in every qualifying cell, paired by seed, Holm
    over the whole family."""
    from baselines.apps.stats import paired_t_test
    from scope_envs.core.stats import holm

    tests = []
    for cell in cells:
        single = [f[HELDOUT_SUCCESS] for f in load_finals(out, cell, "single", SEEDS)]
        for remedy in REMEDIES:
            values = [f[HELDOUT_SUCCESS] for f in load_finals(out, cell, remedy, SEEDS)]
            if len(values) == len(single) == len(SEEDS):
                tests.append(Test(cell, remedy, paired_t_test(values, single)))
    return [replace(t, adjusted_p=p) for t, p in zip(tests, holm([t.result.p_value for t in tests]))]


def _interval(values: list[float]) -> str:
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f}" if not math.isnan(half) else f"{mean:.3f}"


def _signed(r: Any) -> str:
    return f"{r.difference:+.3f} [{r.low:+.3f}, {r.high:+.3f}]"


def write_results(out: Path, docs: Path) -> Path:
    """positive_control.md/json from the pilot; then, for qualifying cells, the confirmatory
    control, the remedy tests, every arm's outcomes; and runs.jsonl, the record of every run."""
    from baselines.apps.stats import paired_t_test

    docs.mkdir(parents=True, exist_ok=True)
    control = pilot_control(out)
    qualifying = [Cell.parse(name) for name, row in control.items() if row["qualifies"]]
    tests = remedy_tests(out, qualifying)
    lines = [
        "# Results: the v1 collapse study",
        "",
        "Design, hypotheses and decision rules: [preregistration.md](preregistration.md); the corpus fit: "
        "[corpus_fit.md](corpus_fit.md). Outcome: held-out success on the fitted population at the last step. "
        "Generated by `python -m baselines.apps.study analyze`.",
        "",
        "## Positive control (pilot seeds " + f"{PILOT_SEEDS[0]}-{PILOT_SEEDS[-1]})",
        "",
        f"G = trained on the population itself minus single-simulator RL, paired by seed. MDE: the smallest "
        f"difference a paired t-test detects at {len(SEEDS)} seeds with power {POWER}, alpha {ALPHA} / "
        f"{confirmatory_tests()} (the family's largest size). A cell qualifies for remedy tests when G >= MDE.",
        "",
        "| gamma | spread | G [95% CI] | SD of paired differences | MDE | qualifies "
        "| seeds for MDE <= G (exploratory) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in control.items():
        cell = Cell.parse(name)
        gap = f"{row['difference']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}]"
        lines.append(
            f"| {cell.gamma:g} | {cell.spread:g} | {gap} | {row['sd']:.3f} | {row['mde_at_confirmatory_seeds']:.3f} | "
            f"{'yes' if row['qualifies'] else 'no'} | {row['seeds_for_mde_at_g'] or '-'} |"
        )
    if not qualifying:
        lines += [
            "",
            f"**No cell qualifies**: in every cell the gap a perfect remedy would close (G) is below what {len(SEEDS)} "
            "seeds can detect (the MDE), so no remedy is tested and no remedy result is called.",
        ]
    else:
        lines += [
            "",
            f"## Confirmatory runs (seeds {SEEDS[0]}-{SEEDS[-1]}), qualifying cells",
            "",
            "Held-out success on the population, mean ± 95% t-interval over seeds; other families: mean success on "
            "each seed's own panel of four families (between-family transfer, secondary).",
            "",
            "| gamma | spread | arm | held-out success | other families | G at these seeds |",
            "|---|---|---|---|---|---|",
        ]
        for cell in qualifying:
            finals = {arm: load_finals(out, cell, arm, SEEDS) for arm in ARMS}
            gap = paired_t_test(*([f[HELDOUT_SUCCESS] for f in finals[a]] for a in ("heldout", "single")))
            for arm in ARMS:
                population = _interval([v[HELDOUT_SUCCESS] for v in finals[arm]])
                panel = _interval([v["panel_success"] for v in finals[arm]])
                lines.append(
                    f"| {cell.gamma:g} | {cell.spread:g} | {LABELS[arm]} | {population} | {panel} | "
                    f"{_signed(gap) if arm == 'heldout' else ''} |"
                )
        lines += [
            "",
            "## Remedy tests (paired by seed: each seed's training family is a random intercept; Holm over the family)",
            "",
            "| hypothesis | gamma | spread | remedy - single [95% CI] | p | Holm p | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for t in tests:
            label = "H1" if t.remedy == "vs" else "H2"
            lines.append(
                f"| {label} | {t.cell.gamma:g} | {t.cell.spread:g} | {_signed(t.result)} | {t.result.p_value:.2g} | "
                f"{t.adjusted_p:.2g} | {t.verdict} |"
            )
    follow_up = Path(FOLLOW_UP_OUT) if out == Path("runs/study-v1") else out.with_name(out.name + "-followup")
    record_follow_up: dict[str, Any] = {}
    if follow_up.is_dir():
        extra, record_follow_up = follow_up_lines(follow_up)
        lines += ["", *extra]
        write_record(follow_up, docs / "runs-followup.jsonl")
    (docs / "results.md").write_text("\n".join(lines) + "\n")
    record = {
        "positive_control": control,
        "qualifying_cells": [c.name for c in qualifying],
        "tests": [
            {
                "cell": t.cell.name,
                "remedy": t.remedy,
                **t.result.as_dict(),
                "holm_p": t.adjusted_p,
                "verdict": t.verdict,
            }
            for t in tests
        ],
    }
    record["follow_up"] = record_follow_up
    (docs / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    write_record(out, docs / "runs.jsonl")
    return docs / "results.md"


def follow_up_lines(out: Path) -> tuple[list[str], dict[str, Any]]:
    """The follow-up's tests: G confirmed first (paired t, alpha 0.05); then, only if it is,
    H1 and H2 with Holm over the two."""
    from baselines.apps.stats import paired_t_test
    from scope_envs.core.stats import holm

    cell, seeds = FOLLOW_UP_CELL, FOLLOW_UP_SEEDS
    finals = {arm: load_finals(out, cell, arm, seeds) for arm in ARMS}
    if any(len(v) < len(seeds) for v in finals.values()):
        done = {arm: len(v) for arm, v in finals.items()}
        return [f"The follow-up is incomplete ({done} of {len(seeds)} seeds per arm): not analysed."], {}
    success = {arm: [f[HELDOUT_SUCCESS] for f in v] for arm, v in finals.items()}
    gap = paired_t_test(success["heldout"], success["single"])
    confirmed = gap.difference > 0 and gap.p_value < ALPHA
    lines = [
        f"## Follow-up: gamma {cell.gamma:g}, spread {cell.spread:g}, seeds {seeds[0]}-{seeds[-1]}",
        "",
        "| arm | held-out success | other families |",
        "|---|---|---|",
        *(
            f"| {LABELS[arm]} | {_interval(success[arm])} | {_interval([f['panel_success'] for f in finals[arm]])} |"
            for arm in ARMS
        ),
        "",
        f"Positive control: G = {_signed(gap)}, paired t-test p = {gap.p_value:.2g}: "
        + ("**confirmed**." if confirmed else "**not confirmed**, so no remedy result is called."),
    ]
    record: dict[str, Any] = {
        "cell": cell.name,
        "seeds": len(seeds),
        "positive_control": gap.as_dict(),
        "confirmed": confirmed,
        "tests": [],
    }
    if confirmed:
        results = {r: paired_t_test(success[r], success["single"]) for r in REMEDIES}
        adjusted = dict(zip(results, holm([t.p_value for t in results.values()])))
        lines += [
            "",
            "| hypothesis | remedy - single [95% CI] | p | Holm p | share of G | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for remedy, test in results.items():
            verdict = Test(cell, remedy, test, adjusted[remedy]).verdict
            label = "H1" if remedy == "vs" else "H2"
            lines.append(
                f"| {label} ({LABELS[remedy]}) | {_signed(test)} | {test.p_value:.2g} | {adjusted[remedy]:.2g} | "
                f"{test.difference / gap.difference:+.0%} | {verdict} |"
            )
            record["tests"].append({"remedy": remedy, **test.as_dict(), "holm_p": adjusted[remedy], "verdict": verdict})
    return lines, record


# ---- the record and its verification -------------------------------------------------------------


def write_record(out: Path, path: Path, target: str | None = None) -> int:
    """One line per finished run: its cell, arm, seed, trainer config, outcomes and provenance
    (`target`: the held-out target; by default each run's own, the first of its evaluation simulators)."""
    lines = []
    for final in sorted(out.glob(f"*/runs/*/{FINAL}")):
        arm, seed = final.parent.name.rsplit("-seed", 1)
        result = json.loads(final.read_text())
        config = json.loads((final.parent / "run_config.json").read_text())
        outcome = {k: v for k, v in result.items() if k not in NOT_OUTCOMES}
        lines.append(
            json.dumps(
                {
                    "cell": final.parents[2].name,
                    "arm": arm,
                    "seed": int(seed),
                    "config": config,
                    "target": target if target is not None else result.get("target", _target_of(config)),
                    "outcome": outcome,
                    "provenance": result["provenance"],
                },
                sort_keys=True,
            )
        )
    commits = {json.loads(line)["provenance"]["commit"] for line in lines}
    if len(commits) > 1:
        raise SystemExit(f"the runs under {out} come from {len(commits)} commits: a record holds one")
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def _target_of(config: dict[str, Any]) -> str | None:
    """The held-out target of a run recorded before runs stated theirs: the first of its evaluation
    simulators (the default study's target where a config names none)."""
    return config.get("eval_simulators", [DemoSettings().target])[0]


def rerun(config: dict[str, Any], target: str | None) -> dict[str, Any]:
    """One recorded run again, here, in a scratch folder: its outcomes."""
    return rerun_here(config, target)[0]


def rerun_here(config: dict[str, Any], target: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`rerun`: its outcomes and its provenance."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch, portable_pool(1) as pool:
        config = {**config, "output_dir": str(Path(scratch) / "run")}
        result = pool.submit(_run, config, max(config["steps"] // 10, 1), target, provenance()).result()
    return {k: v for k, v in result.items() if k not in NOT_OUTCOMES}, result["provenance"]


# What a rerun at the recorded commit runs: the demo's training and outcome functions, which every
# commit of the v1 study has (in `baselines.demo` before the package was regrouped).
RERUN_A_DEMO_RUN = """
try:
    from baselines.apps.demo import _train, final_values
except ModuleNotFoundError:
    from baselines.demo import _train, final_values
config, target = request["config"], request["target"]
reply = final_values(_train(config), max(config["steps"] // 10, 1), target)
"""


def rerun_at(commit: str, config: dict[str, Any], target: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """`rerun_here` with the code of `commit` only (`baselines.apps.provenance.run_at_commit`)."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        config = {**config, "output_dir": str(Path(scratch) / "run")}
        outcome, made = run_at_commit(commit, RERUN_A_DEMO_RUN, {"config": config, "target": target})
    return outcome, {"commit": commit, **made}


def verify(record: Path, sample: int, *, seed: int = 0, here: bool = False) -> list[str]:
    """Reruns `sample` recorded runs (drawn with `seed`) with the code of the commit each names
    (`here`: with this checkout's code) and lists every outcome that differs, each with the entries of
    the provenance (versions, platform) that differ between the record and the rerun."""
    if sample < 1:
        raise SystemExit("verify reruns at least one recorded run: --sample 1 or more")
    runs = [json.loads(line) for line in record.read_text().splitlines() if line.strip()]
    chosen = np.random.default_rng(seed).choice(len(runs), size=min(sample, len(runs)), replace=False)
    differences = []
    for index in sorted(chosen):
        run = runs[index]
        target = run.get("target")
        name = f"{run['cell']} {run['arm']} seed {run['seed']}"
        if here:
            again, made = rerun_here(run["config"], target)
        else:
            commit = recorded_commit(run["provenance"], name)
            again, made = rerun_at(commit, run["config"], target)
        differing = {key: recorded for key, recorded in run["outcome"].items() if again.get(key) != recorded}
        beside = "; ".join(provenance_differences(run["provenance"], made)) or "none"
        differences += [
            f"{name}: {key} {again.get(key)!r} != recorded {recorded!r} "
            f"(provenance differing from the record: {beside})"
            for key, recorded in differing.items()
        ]
        where = "this checkout" if here else f"commit {commit[:10]}"
        print(f"reran {name} at {where}", flush=True)
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.apps.study", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["pilot", "run", "follow-up", "analyze", "verify"])
    parser.add_argument(
        "--out", default="runs/study-v1", help=f"where the runs go (runs/study-v1; the follow-up: {FOLLOW_UP_OUT})"
    )
    parser.add_argument("--docs", default="docs/study/v1", help="analyze: results go here; verify: its runs.jsonl")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--sample", type=int, default=5, help="verify: recorded runs to rerun")
    parser.add_argument("--record", default="runs.jsonl", help="verify: the record in --docs (runs.jsonl)")
    parser.add_argument(
        "--here", action="store_true", help="verify with this checkout's code, not the recorded commit's"
    )
    args = parser.parse_args(argv)
    out, docs, base = Path(args.out), Path(args.docs), DemoSettings()
    if args.action == "verify":
        differences = verify(docs / args.record, args.sample, here=args.here)
        for line in differences:
            print(f"DIFFERS: {line}")
        print(f"{args.sample} recorded runs rerun: {'all identical' if not differences else 'differences found'}")
        return 1 if differences else 0
    if args.action == "analyze":
        print(f"results: {write_results(out, docs)}")
        return 0
    if args.action == "follow-up":
        out = Path(args.out) if args.out != "runs/study-v1" else Path(FOLLOW_UP_OUT)
    check_provenance(out, provenance())
    if args.action == "follow-up":
        todo = plan_runs(out, base, [FOLLOW_UP_CELL], ARMS, FOLLOW_UP_SEEDS)
    elif args.action == "pilot":
        todo = plan_runs(out, base, grid(), CONTROL_ARMS, PILOT_SEEDS)
    else:
        cells = [Cell.parse(name) for name, row in pilot_control(out).items() if row["qualifies"]]
        if not cells:
            print("no cell qualifies by the pilot's positive control: nothing to run")
            return 0
        todo = plan_runs(out, base, cells, ARMS, SEEDS)
    print(f"trained {run_configs(todo, base, jobs=args.jobs)} runs under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
