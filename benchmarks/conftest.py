"""Benchmarks under pytest-benchmark: each measures our side and its anchor in the same session.

    pytest benchmarks/ --benchmark-only [--benchmark-json=bench.json]

A benchmark test asks for the `compare` fixture and calls `compare(group, side, fn)` with `side`
"ours" or "anchor": `fn` is timed by pytest-benchmark and returns how much work it did per call
(turns, episodes, rewards; None counts as 1), so that sides doing different amounts of work compare
by time per unit. At the end of the
session the ratio of each group (anchor time per unit / ours; above 1: ours is faster) is printed
and written into the JSON (`"ratios"`). `--benchmark-only` switches benchmarks on even though the
project's default options disable them (which keeps them cheap wherever they are collected).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

SIDES = ("ours", "anchor")
_MEASURED: dict[str, dict[str, float]] = {}


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("benchmark_only", default=False):
        config.option.benchmark_enable = True


@pytest.fixture
def compare(benchmark: Any) -> Callable[..., Any]:
    def measure(group: str, side: str, fn: Callable[[], Any], *, rounds: int = 3) -> Any:
        """Times `fn` as `side` of `group`; returns its last result."""
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        benchmark.group = group
        result = benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1 if rounds > 1 else 0)
        work = 1.0 if result is None else float(result)
        benchmark.extra_info.update(side=side, work=work)
        if not benchmark.disabled:
            _MEASURED.setdefault(group, {})[side] = benchmark.stats.stats.median / work
        return result

    return measure


def ratios() -> dict[str, float]:
    """Anchor time per unit of work / ours, for each group where both sides ran."""
    return {group: sides["anchor"] / sides["ours"] for group, sides in _MEASURED.items() if set(sides) >= set(SIDES)}


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables
def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _MEASURED:
        return
    terminalreporter.section("ratios against the anchors (anchor time per unit / ours; above 1: ours is faster)")
    for group, sides in sorted(_MEASURED.items()):
        if set(sides) >= set(SIDES):
            terminalreporter.write_line(f"{group}: {sides['anchor'] / sides['ours']:.2f}x")
        else:
            terminalreporter.write_line(f"{group}: only {', '.join(sides)} ran, no ratio")


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["ratios"] = ratios()
