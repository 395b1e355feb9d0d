"""A data-parallel learner group on Ray (`baselines.distributed.learner_group`): two ranks on two
nodes train as one process does, and a rank killed mid-run ends the run cleanly, after which
`--resume` continues it exactly. The module shares one two-node cluster (one CPU per node); the
kill-and-resume test is `slow`:

    pytest tests/test_ray_learner_group.py -m slow
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray.cluster_utils import Cluster  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from test_training import TINY  # noqa: E402

from baselines.distributed.learner_group import LearnerGroup, LearnerRankLost, rank_bundle, train_on_ray  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402

TESTS = Path(__file__).resolve().parent
# population co-training of two tiny language models; 3 groups of a step split 2 + 1 over the ranks,
# a snapshot joins the pool at every step and plays some groups
POPULATION = [
    *TINY,
    "method=population",
    "simulator_policy=tiny",
    "pool_draw=group",  # members drawn per group, the live simulator in one at least: both ranks train it
    "live_min_share=0.25",
    "groups_per_step=3",
    "group_size=2",
    "micro_batch=2",
    "pool_every=1",
    "steps=3",
    "eval_every=3",
    "checkpoint_every=2",
    "keep_checkpoints=5",
    "ray_address=auto",
]
COMPARED = ["reward_mean", "reward_std", "success", "turns", "simulator/reward_trained", "pool/live_share"]


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each: one rank per node. The ranks import the test's simulators."""
    two_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    two_nodes.add_node(num_cpus=1)
    ray.init(address=two_nodes.address, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})
    try:
        yield two_nodes
    finally:
        ray.shutdown()
        two_nodes.shutdown()


def final_weights(out: Path) -> dict[str, dict[str, torch.Tensor]]:
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    return {side: load_file(str(latest / side / "policy" / "model.safetensors")) for side in ("agent", "user")}


def test_two_learner_ranks_on_two_nodes_train_as_one_process(cluster, tmp_path):
    settings = [*POPULATION, "steps=2"]  # step 2's groups draw from a pool that changed after step 1
    alone = Trainer(load_config(None, [*settings, "ray_address=null", f"output_dir={tmp_path / 'one'}"]))
    expected = alone.run(progress=False)
    group = LearnerGroup(load_config(None, [*settings, "learner_ranks=2", f"output_dir={tmp_path / 'two'}"]))
    try:
        nodes = ray.get([member.node.remote() for member in group.ranks])
        history = group.train(progress=False)
    finally:
        group.close()
    assert len(set(nodes)) == 2, "one rank per node"
    assert [r["step"] for r in history] == [1, 2] == [r["step"] for r in expected]
    assert any(k.startswith("pool/agent_reward/snapshot") for r in history for k in r), "snapshots played"
    for ranks, one in zip(history, expected):
        assert {k: ranks[k] for k in COMPARED} == {k: one[k] for k in COMPARED}, "the same episodes"
        assert sorted(k for k in ranks if k.startswith("pool/agent_reward")) == sorted(
            k for k in one if k.startswith("pool/agent_reward")
        )
        for key in ("loss", "grad_norm", "simulator/loss", "simulator/grad_norm"):
            assert ranks[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key
    assert history[-1]["heldout_success"] == expected[-1]["heldout_success"]
    assert len(list((tmp_path / "two" / "sim_pool").glob("ckpt-*"))) == len(alone.pool.members)
    trained, reference = final_weights(tmp_path / "two"), final_weights(tmp_path / "one")
    for side in ("agent", "user"):
        for name, tensor in reference[side].items():
            assert torch.allclose(trained[side][name], tensor, rtol=1e-4, atol=1e-6), (side, name)


def test_a_run_asking_for_more_than_the_cluster_has_is_refused(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr("baselines.distributed.learner_group.PLACEMENT_TIMEOUT_S", 3.0)
    config = load_config(None, [*POPULATION, "learner_ranks=2", "cpus_per_rank=4", f"output_dir={tmp_path}"])
    with pytest.raises(Exception, match="cannot place 2 learner ranks"):
        train_on_ray(config, progress=False)


def test_learner_ranks_need_ray():
    with pytest.raises(ValueError, match="runs its ranks on Ray"):
        load_config(None, [*POPULATION, "ray_address=null", "learner_ranks=2"])


@pytest.mark.slow
def test_a_killed_learner_rank_ends_the_run_and_resume_continues_exactly(cluster, tmp_path):
    settings = [*POPULATION, "learner_ranks=2", "steps=4"]
    train_on_ray(load_config(None, [*settings, f"output_dir={tmp_path / 'whole'}"]), progress=False)
    out = tmp_path / "killed"
    config = load_config(None, [*settings, f"output_dir={out}"])
    group = LearnerGroup(config)
    victim = group.pids()[1]

    def kill_after_the_first_checkpoint():
        while not (out / "checkpoints" / "latest").is_file():
            time.sleep(0.05)
        os.kill(victim, signal.SIGKILL)

    killer = threading.Thread(target=kill_after_the_first_checkpoint, daemon=True)
    killer.start()
    started = time.monotonic()
    try:
        with pytest.raises(LearnerRankLost, match=r"learner rank 1 died.*--resume"):
            group.train(progress=False)
    finally:
        group.close()
    assert time.monotonic() - started < 120, "the run ends at once, not at a collective's timeout"
    steps = [r["step"] for r in train_on_ray(config, resume=True, progress=False)]
    assert steps == [1, 2, 3, 4]
    resumed, whole = final_weights(out), final_weights(tmp_path / "whole")
    for side in ("agent", "user"):
        for name, tensor in whole[side].items():
            assert torch.equal(resumed[side][name], tensor), (side, name)


def test_each_rank_gets_its_cpus_and_a_whole_share_of_the_gpus():
    config = load_config(None, [*POPULATION, "learner_ranks=4", "gpus=8", "cpus_per_rank=2"])
    assert rank_bundle(config, cluster_gpus=8) == {"CPU": 2.0, "GPU": 2.0}
    assert rank_bundle(config, cluster_gpus=0) == {"CPU": 2.0}, "a CPU cluster: no GPU asked for"
    with pytest.raises(Exception, match="multiple of learner_ranks"):
        rank_bundle(load_config(None, [*POPULATION, "learner_ranks=2", "gpus=1"]), cluster_gpus=1)
