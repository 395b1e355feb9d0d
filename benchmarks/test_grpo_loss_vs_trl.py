"""The same GRPO update (loss and gradient) through this trainer (ours) and TRL's `GRPOTrainer` (the anchor)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="the anchor is TRL's GRPOTrainer: pip install -e '.[bench]'")

from grpo_loss_vs_trl import build_updates


@pytest.fixture(scope="module")
def updates(tmp_path_factory):
    ours, theirs = build_updates(16, 96, 64, str(tmp_path_factory.mktemp("trl")))
    assert ours() == pytest.approx(theirs(), rel=1e-4), "both sides compute the same loss"
    return {"ours": ours, "anchor": theirs}


@pytest.mark.parametrize("side", ["ours", "anchor"])
def test_grpo_update(compare, updates, side):
    update = updates[side]

    def one_update() -> int:
        update()
        return 1

    compare("grpo-loss-vs-trl", side, one_update, rounds=10)
