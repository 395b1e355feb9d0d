"""One text training step of the exploitation pilot's config (`p4g_smollm2_exploit`: SmolLM2-135M,
2 groups x 4 episodes, 3 exchanges, 64 new tokens) against plain transformers doing the same work
(`benchmarks/text_step.py`), each side in a fresh process on one thread. The ratio is per step;
each side's phases, tokens/s and peak RSS go into the JSON's `extra_info`. About 5 minutes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("transformers", reason="generation needs the hf extra")

from text_step import CONFIG, anchor_step, in_fresh_process, our_step, report

MEASURED: dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _smollm2():
    from sims.hf_backend import smollm2_path

    try:
        smollm2_path()
    except ImportError as error:
        pytest.skip(f"no SmolLM2 weights: {error}")


def run_side(side: str, folder: str) -> dict[str, Any]:
    if side == "ours":
        MEASURED["ours"] = in_fresh_process(our_step, CONFIG, [], folder)
        return MEASURED["ours"]
    if "ours" not in MEASURED:  # the anchor replays our step's turns: take one first
        MEASURED["ours"] = in_fresh_process(our_step, CONFIG, [], folder + "-ours")
    MEASURED["anchor"] = in_fresh_process(anchor_step, CONFIG, [], folder, MEASURED["ours"]["samples"])
    return MEASURED["anchor"]


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_text_step(compare, benchmark, side, tmp_path):
    result = compare("text-step-vs-plain-transformers", side, lambda: run_side(side, str(tmp_path)) and None, rounds=1)
    measured = MEASURED[side]
    benchmark.extra_info.update(
        phases=measured["seconds"],
        generated_tokens=measured["generated_tokens"],
        peak_rss_mb=measured["peak_rss_mb"],
    )
    assert result is None
    if side == "anchor":
        print("\n" + report({"ours": MEASURED["ours"], "anchor": measured}))
