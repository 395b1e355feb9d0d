"""The pre-registered collapse study (docs/study/preregistration.md): a sweep of `scope demo` cells.

`python -m baselines.study run` trains every (gamma, spread, method, seed) of the grid with the
demo's settings, two processes at a time, and keeps each finished run's final metrics
(`<out>/<cell>/runs/<method>-seed<seed>/final.json`), so a stopped sweep resumes where it was.
`python -m baselines.study analyze` runs the pre-registered tests (Welch's t-test, Holm over the
confirmatory family), draws the phase diagram and writes `results.md` and `results.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from baselines.demo import LABELS, DemoSettings, final_values, mean_interval, run_config

GAMMAS = (1.0, 3.0, 10.0)
SPREADS = (1.0, 2.0, 0.5)  # the demo's spread first: a sweep stopped early has the most useful cells
METHODS = ("single", "vs", "population")
REMEDIES = ("vs", "population")
SEEDS = 10
ALPHA = 0.05
FINAL = "final.json"


@dataclass(frozen=True)
class Cell:
    gamma: float
    spread: float

    @property
    def name(self) -> str:
        return f"gamma{self.gamma:g}-spread{self.spread:g}"


def grid(gammas: tuple[float, ...] = GAMMAS, spreads: tuple[float, ...] = SPREADS) -> list[Cell]:
    return [Cell(gamma, spread) for spread in spreads for gamma in gammas]


def cell_settings(base: DemoSettings, cell: Cell, out: Path) -> DemoSettings:
    """The demo's settings for one cell; held-out success is measured once, at the last step."""
    return replace(base, gamma=cell.gamma, spread=cell.spread, eval_every=base.steps, out=str(out / cell.name))


def _run(config: dict[str, Any], tail: int) -> dict[str, Any]:
    from baselines.demo import _train

    started = time.perf_counter()
    history = _train(config)
    finals = final_values(history, tail)
    result = {**finals, "seconds": time.perf_counter() - started}
    path = Path(config["output_dir"]) / FINAL
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)
    return result


def run_sweep(
    out: Path,
    *,
    base: DemoSettings | None = None,
    cells: list[Cell] | None = None,
    methods: tuple[str, ...] = METHODS,
    seeds: int = SEEDS,
    jobs: int = 2,
    progress: bool = True,
) -> int:
    """Trains every run of the grid that has no `final.json` yet; the number trained."""
    from tqdm.auto import tqdm

    base = base or DemoSettings()
    tail = max(base.steps // 10, 1)
    todo = []
    for cell in cells or grid():
        settings = cell_settings(base, cell, out)
        for seed in range(seeds):
            for method in methods:
                config = run_config(settings, method, seed)
                if not (Path(config["output_dir"]) / FINAL).is_file():
                    todo.append(config)
    context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    bar = tqdm(total=len(todo), desc="study", unit="run", disable=not progress)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        pending = {pool.submit(_run, config, tail) for config in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()
                bar.update(1)
    bar.close()
    return len(todo)


def load_outcomes(out: Path, cells: list[Cell] | None = None) -> dict[Cell, dict[str, list[float]]]:
    """Held-out success per cell and method, over the seeds that finished (in seed order)."""
    outcomes: dict[Cell, dict[str, list[float]]] = {}
    for cell in cells or grid():
        runs = out / cell.name / "runs"
        by_method: dict[str, list[float]] = {}
        for method in METHODS:
            files = sorted(runs.glob(f"{method}-seed*/{FINAL}"), key=lambda p: int(p.parent.name.rsplit("seed", 1)[1]))
            values = [json.loads(path.read_text())["heldout_success"] for path in files]
            if values:
                by_method[method] = values
        if by_method:
            outcomes[cell] = by_method
    return outcomes


# ---- analysis ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Test:
    hypothesis: str
    cell: Cell
    a: str  # what is compared, e.g. "vs" or "single@gamma3"
    b: str
    welch: Any
    confirmatory: bool
    adjusted_p: float = float("nan")

    @property
    def verdict(self) -> str:
        if not self.adjusted_p < ALPHA:
            return "no detectable effect"
        return "helps" if self.welch.difference > 0 else "hurts"


def planned_tests(outcomes: dict[Cell, dict[str, list[float]]]) -> list[Test]:
    """Every pre-registered test the finished cells allow, with Holm-adjusted p-values per family."""
    from baselines.stats import holm, welch_test

    tests: list[Test] = []
    for cell, values in outcomes.items():
        collapsed = cell.gamma > 1
        for remedy, label in (("vs", "H1"), ("population", "H2")):
            if len(values.get(remedy, [])) >= 2 and len(values.get("single", [])) >= 2:
                hypothesis = label if collapsed else f"{label} (exploratory, gamma 1)"
                welch = welch_test(values[remedy], values["single"])
                tests.append(Test(hypothesis, cell, remedy, "single", welch, confirmatory=collapsed))
        unsharpened = outcomes.get(Cell(1.0, cell.spread), {}).get("single", [])
        if collapsed and len(values.get("single", [])) >= 2 and len(unsharpened) >= 2:
            welch = welch_test(values["single"], unsharpened)
            tests.append(Test("H3", cell, f"single@gamma{cell.gamma:g}", "single@gamma1", welch, confirmatory=True))
    adjusted: list[Test] = []
    for family in (True, False):
        members = [t for t in tests if t.confirmatory == family]
        for test, p in zip(members, holm([t.welch.p_value for t in members])):
            adjusted.append(replace(test, adjusted_p=p))
    return adjusted


def demo_cell(tests: list[Test]) -> Cell | None:
    """The pre-registered choice of `scope demo`'s regime: the cell with the most confirmatory
    'helps' verdicts of the remedies, ties broken by the larger smallest Cohen's d among them."""
    scores: dict[Cell, tuple[int, float]] = {}
    for test in tests:
        if test.confirmatory and test.hypothesis in ("H1", "H2") and test.verdict == "helps":
            count, smallest = scores.get(test.cell, (0, math.inf))
            scores[test.cell] = (count + 1, min(smallest, test.welch.cohen_d))
    return max(scores, key=lambda cell: scores[cell]) if scores else None


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def phase_diagram(outcomes: dict[Cell, dict[str, list[float]]], tests: list[Test], path: Path) -> Path:
    """One panel per remedy: (gamma, spread) cells coloured by the remedy's difference from single,
    annotated with its verdict; cells where collapse hurts are outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gammas = sorted({c.gamma for c in outcomes})
    spreads = sorted({c.spread for c in outcomes})
    verdicts = {(t.hypothesis.split()[0], t.cell): t for t in tests}
    figure, axes = plt.subplots(1, len(REMEDIES), figsize=(5.2 * len(REMEDIES), 4.2))
    for axis, (remedy, label) in zip(np.atleast_1d(axes), (("vs", "H1"), ("population", "H2"))):
        grid_values = np.full((len(spreads), len(gammas)), np.nan)
        for (name, cell), test in verdicts.items():
            if name == label:
                grid_values[spreads.index(cell.spread), gammas.index(cell.gamma)] = test.welch.difference
        limit = max(np.nanmax(np.abs(grid_values)) if np.isfinite(grid_values).any() else 0.1, 0.02)
        image = axis.imshow(grid_values, cmap="RdBu", vmin=-limit, vmax=limit, origin="lower", aspect="auto")
        for (name, cell), test in verdicts.items():
            row, column = spreads.index(cell.spread), gammas.index(cell.gamma)
            if name == label:
                mark = {"helps": "helps", "hurts": "hurts", "no detectable effect": "n.s."}[test.verdict]
                mark += "" if test.confirmatory else " (expl.)"
                axis.text(
                    column,
                    row,
                    f"{test.welch.difference:+.3f}\n{mark}\nHolm p={_fmt_p(test.adjusted_p)}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if abs(test.welch.difference) > 0.6 * limit else "black",
                )
            if name == "H3" and test.verdict == "hurts":
                axis.add_patch(plt.Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, lw=2.5, ec="black"))
        axis.set_xticks(range(len(gammas)), [f"{g:g}" for g in gammas])
        axis.set_yticks(range(len(spreads)), [f"{s:g}" for s in spreads])
        axis.set_xlabel("collapse sharpness gamma of the training simulator")
        axis.set_ylabel("simulator spread")
        axis.set_title(f"{LABELS[remedy]} - single (held-out success)", fontsize=10)
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle("Where collapse hurts (outlined: H3) and where each remedy helps (Holm-adjusted p)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _interval(values: list[float]) -> str:
    mean, half = mean_interval(values)
    return f"{mean:.3f} ± {half:.3f}" if not math.isnan(half) else f"{mean:.3f}"


def write_results(out: Path, docs: Path | None = None, *, seeds: int = SEEDS) -> Path:
    """Tests, the phase diagram, results.md and results.json (into `docs` if given, else `out`).
    Only complete cells (every method with `seeds` finished runs) are tested, as pre-registered."""
    found = load_outcomes(out)
    if not found:
        raise ValueError(f"no finished runs under {out}: run `python -m baselines.study run --out {out}` first")
    outcomes = {c: v for c, v in found.items() if all(len(v.get(m, [])) >= seeds for m in METHODS)}
    incomplete = [c for c in grid() if c not in outcomes]
    tests = planned_tests(outcomes)
    target = docs or out
    target.mkdir(parents=True, exist_ok=True)
    diagram = phase_diagram(outcomes or found, tests, target / "phase_diagram.png")
    chosen = demo_cell(tests)
    lines = [
        "# Results: simulator collapse study (pre-registered)",
        "",
        "Design, hypotheses and decision rules: [preregistration.md](preregistration.md). Held-out success at "
        "the last step of each run; mean ± 95% t-interval over seeds.",
        "",
        "| gamma | spread | " + " | ".join(f"{LABELS[m]} (n)" for m in METHODS) + " |",
        "|---|---|" + "---|" * len(METHODS),
    ]
    for cell in sorted(found, key=lambda c: (c.spread, c.gamma)):
        values = found[cell]
        cells = [f"{_interval(values[m])} ({len(values[m])})" if m in values else "-" for m in METHODS]
        lines.append(f"| {cell.gamma:g} | {cell.spread:g} | " + " | ".join(cells) + " |")
    if incomplete:
        names = ", ".join(f"gamma {c.gamma:g} / spread {c.spread:g}" for c in incomplete)
        lines += ["", f"Not tested (fewer than {seeds} finished runs for some method, or none): {names}."]
    for family, title in ((True, "Confirmatory tests (Holm over this family)"), (False, "Exploratory tests")):
        members = [t for t in tests if t.confirmatory == family]
        lines += [
            "",
            f"## {title}",
            "",
            "| hypothesis | gamma | spread | comparison | difference [95% CI] | Cohen's d | p | Holm p | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for t in sorted(members, key=lambda t: (t.hypothesis, t.cell.spread, t.cell.gamma)):
            w = t.welch
            lines.append(
                f"| {t.hypothesis} | {t.cell.gamma:g} | {t.cell.spread:g} | {t.a} - {t.b} | "
                f"{w.difference:+.3f} [{w.low:+.3f}, {w.high:+.3f}] | {w.cohen_d:+.2f} | {_fmt_p(w.p_value)} | "
                f"{_fmt_p(t.adjusted_p)} | {t.verdict} |"
            )
    lines += ["", f"![phase diagram]({diagram.name})", ""]
    choice = f"gamma {chosen.gamma:g}, spread {chosen.spread:g}" if chosen else "none (no remedy helps anywhere)"
    lines += [f"Demo regime by the pre-registered rule: {choice}.", ""]
    path = target / "results.md"
    path.write_text("\n".join(lines))
    record = {
        "outcomes": {cell.name: values for cell, values in found.items()},
        "tested_cells": [cell.name for cell in outcomes],
        "tests": [
            {
                "hypothesis": t.hypothesis,
                "cell": t.cell.name,
                "a": t.a,
                "b": t.b,
                **t.welch.as_dict(),
                "holm_p": t.adjusted_p,
                "confirmatory": t.confirmatory,
                "verdict": t.verdict,
            }
            for t in tests
        ],
        "demo_cell": chosen.name if chosen else None,
    }
    (target / "results.json").write_text(json.dumps(record, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m baselines.study", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "analyze"])
    parser.add_argument("--out", default="runs/study", help="where the runs go (runs/study)")
    parser.add_argument("--docs", default=None, help="analyze: write results here instead of --out")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--seeds", type=int, default=SEEDS, help="seeds per cell and method (a cell is tested once complete)"
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.action == "run":
        trained = run_sweep(out, seeds=args.seeds, jobs=args.jobs)
        print(f"trained {trained} runs under {out}")
        return 0
    print(f"results: {write_results(out, Path(args.docs) if args.docs else None, seeds=args.seeds)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
