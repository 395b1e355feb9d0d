"""A learner group's gradient all-reduce, 2 ranks on gloo: DDP-style buckets (ours) vs one
collective per tensor (the anchor, what the learner group did before), in tensors reduced.

    pytest benchmarks/test_gradient_buckets.py --benchmark-only
"""

from __future__ import annotations

import pytest
from gradient_buckets import BUCKETED, PER_TENSOR, lora_gradients, start_peer, step, stop_peer


@pytest.fixture(scope="module")
def peer():
    process = start_peer()
    yield process
    stop_peer(process)


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_gradient_all_reduce(compare, peer, side):
    gradients = lora_gradients()
    mode = BUCKETED if side == "ours" else PER_TENSOR
    compare("learner-group-all-reduce-2-ranks", side, lambda: step(mode, gradients), rounds=10)
