"""Rollout throughput with SmolLM2 as the P4G persuader: batched generation (ours) against the same
episodes generated one at a time (the anchor), in episodes. `benchmarks/rollout_throughput.py`
prints tokens/s as well."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="generation needs the hf extra")

from rollout_throughput import make_trainer

EPISODES = 4


@pytest.fixture(scope="module")
def trainer():
    from sims.hf_backend import smollm2_path

    try:
        smollm2_path()
    except ImportError as error:
        pytest.skip(f"no SmolLM2 weights: {error}")
    return make_trainer("smollm2", max_new_tokens=24)


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_rollout(compare, trainer, side):
    def collect() -> int:
        batches = [(1, EPISODES)] if side == "ours" else [(1, 1)] * EPISODES
        for groups, group_size in batches:
            players, _ = trainer.players(0, groups)
            trainer.collect(0, group_size=group_size, split="train", players=players)
        return EPISODES

    compare("rollout-batched-vs-one-at-a-time", side, collect, rounds=1)
