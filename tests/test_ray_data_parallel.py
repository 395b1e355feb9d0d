"""Learner data parallelism: two gloo ranks, each with its share of the micro-batches, take the
optimizer step of one rank with the whole batch (`baselines.distributed.data_parallel`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.multiprocessing as mp  # noqa: E402
from test_acts_training import ACTS  # noqa: E402

from baselines.distributed.data_parallel import DataParallel  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402

GROUPS = 4
# 16 samples in micro-batches of 5: ranks get two (5 + 5) and two (5 + 1); no clipping, so the
# optimizer's first moment is a tenth of the gradient itself
SETTINGS = [*ACTS, f"groups_per_step={GROUPS}", "group_size=4", "micro_batch=5", "grad_clip=1e9", "lr=0.05"]


def one_update(rank: int, world_size: int, folder: str) -> None:
    """Rank `rank`'s update on the episodes of step 0 (the same on every rank), saved to `folder`."""
    ranks = None
    if world_size > 1:
        ranks = DataParallel.init(rank, world_size, init_method=f"file://{folder}/rendezvous", backend="gloo")
    trainer = Trainer(
        load_config(None, [*SETTINGS, f"output_dir={folder}/run-{world_size}-{rank}"]), data_parallel=ranks
    )
    try:
        players, labels = trainer.players(0, GROUPS)
        episodes = trainer.collect(0, group_size=4, split="train", players=players)
        learner = trainer.learners["agent"]
        initial = learner.policy.model.weight.detach().clone()
        stats = trainer.update(learner, episodes, list(range(GROUPS)), labels)
        moment = learner.optimizer.state_dict()["state"][0]["exp_avg"]
        result = {"initial": initial, "weight": learner.policy.model.weight.detach(), "exp_avg": moment, **stats}
        torch.save(result, f"{folder}/update-{world_size}-{rank}.pt")
    finally:
        DataParallel.close()


def test_two_gloo_ranks_take_the_step_of_one_rank_with_the_whole_batch(tmp_path):
    one_update(0, 1, str(tmp_path))
    mp.spawn(one_update, args=(2, str(tmp_path)), nprocs=2, join=True)
    whole = torch.load(tmp_path / "update-1-0.pt", weights_only=True)
    ranks = [torch.load(tmp_path / f"update-2-{rank}.pt", weights_only=True) for rank in range(2)]
    assert not torch.equal(whole["weight"], whole["initial"]), "the step moved the policy"
    for rank in ranks:
        assert torch.equal(rank["initial"], whole["initial"])
        assert torch.allclose(rank["exp_avg"], whole["exp_avg"], rtol=1e-5, atol=1e-9)
        assert torch.allclose(rank["weight"], whole["weight"], rtol=1e-5, atol=1e-7)
        assert rank["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
        assert rank["loss"] == pytest.approx(whole["loss"], rel=1e-5, abs=1e-9)
    assert torch.equal(ranks[0]["weight"], ranks[1]["weight"]), "every rank takes the same step"


def test_a_rank_takes_every_world_size_th_micro_batch():
    assert DataParallel(1, 3).shard(range(0, 40, 5)) == [5, 20, 35]
    assert DataParallel(2, 3).shard([0]) == []
