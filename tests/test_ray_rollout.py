"""Rollout workers on Ray: the episodes of the in-process rollout, a worker killed mid-step restarted
with no episode lost or counted twice, and a co-training run end to end on a two-node local cluster.

The module shares one two-node cluster (`ray.cluster_utils.Cluster`, one CPU per node; about 15 s
to start). The CLI kill-and-resume test on Ray is `slow`:

    pytest tests/test_ray_rollout.py -m slow
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray.cluster_utils import Cluster  # noqa: E402
from test_acts_training import ACTS, history, run_cli  # noqa: E402

from baselines.distributed.ray_rollout import RayRollout  # noqa: E402
from baselines.training.config import load_config  # noqa: E402
from baselines.training.trainer import Trainer  # noqa: E402
from scope_envs.core.async_rollout import collect_async  # noqa: E402
from scope_envs.core.failpoints import ENV_VAR  # noqa: E402
from scope_envs.core.rollout import RolloutGroup, collect_chat  # noqa: E402
from scope_envs.core.scripted import FunctionSimulator  # noqa: E402
from sims.testing import SmallTalkEnv  # noqa: E402

COTRAIN = [*ACTS, "method=cotrain", "simulator_policy=family:0@3", "steps=3", "eval_every=3", "checkpoint_every=2"]


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each; this module's players travel to them by value."""
    two_nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    two_nodes.add_node(num_cpus=1)
    ray.init(address=two_nodes.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield two_nodes
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()
        two_nodes.shutdown()


def outcome(episodes):
    """What a rollout decides about each episode; act-level samples as plain lists."""
    return [
        (
            e.group,
            e.scenario_id,
            e.rewards,
            e.end_reason,
            e.turns,
            {
                side: [(s.ids, s.mask, s.logprobs, np.asarray(s.features).tolist()) for s in samples]
                for side, samples in e.samples.items()
            },
        )
        for e in episodes
    ]


def trained_state(out):
    """The weights and optimizer moments of each side in a run's latest checkpoint."""
    latest = out / "checkpoints" / (out / "checkpoints" / "latest").read_text().strip()
    weights = {p.parent.parent.name: torch.load(p, weights_only=True) for p in latest.glob("*/policy/policy.pt")}
    optimizers = {p.parent.name: torch.load(p, weights_only=True) for p in latest.glob("*/optimizer.pt")}
    return weights, optimizers


def clerk(messages, tools, seed):
    return f"Hello, how can I help? ({seed % 7})"


def customer(messages, tools, seed):
    return f"Tell me about plan {seed % 5}, turn {len(messages)}."


def small_talk_groups(count=5):
    players = {"agent": FunctionSimulator(clerk), "user": FunctionSimulator(customer)}
    return [RolloutGroup(100 + g, players) for g in range(count)]


def test_rollout_workers_give_the_in_process_episodes(cluster):
    rollout = RayRollout(SmallTalkEnv, {"exchanges": 3}, local=collect_chat, workers=2, groups_per_task=2)
    try:
        make_env = lambda: SmallTalkEnv(exchanges=3)  # noqa: E731
        expected = collect_chat(make_env, small_talk_groups(), group_size=3, split="train")
        on_ray = rollout(make_env, small_talk_groups(), group_size=3, split="train", key=(0, 0, 0))
        assert on_ray == expected
        assert [e.group for e in on_ray] == [g for g in range(5) for _ in range(3)]
        assert len(set(rollout.worker_pids())) == 2
        assert collect_async(make_env, small_talk_groups(), group_size=3, split="train") == expected
    finally:
        rollout.close()


def test_act_level_episodes_depend_on_the_task_not_on_the_worker_count(cluster, tmp_path):
    trainer = Trainer(load_config(None, [*COTRAIN, f"output_dir={tmp_path}"]))
    players, _ = trainer.players(0, 4)
    groups = [RolloutGroup(7 + g, p) for g, p in enumerate(players)]
    episodes = []
    for workers in (1, 2):  # one after the other: the cluster has a CPU for each of two workers
        rollout = RayRollout("PersuasionActs", local=trainer.rollout, workers=workers)
        try:
            episodes.append(rollout(trainer.make_env, groups, group_size=4, split="train", key=(0, 1, 0)))
        finally:
            rollout.close()
    assert outcome(episodes[0]) == outcome(episodes[1])
    assert {side for e in episodes[0] for side in e.samples} == {"agent", "user"}


def killed_once(player, marker: Path):
    """The act-level player, whose process SIGKILLs itself at its first turn while `marker` is absent."""

    class KilledOnce:
        def __init__(self):
            self.player, self.marker = player, marker

        def act(self, features, allowed, rng):
            if not self.marker.exists():
                self.marker.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            return self.player.act(features, allowed, rng)

        def __getattr__(self, name):  # the rest (sequence_logprobs: its turns are kept) is the player's
            if name == "player":
                raise AttributeError(name)
            return getattr(self.player, name)

    return KilledOnce()


def test_a_worker_killed_mid_step_is_restarted_and_its_groups_rerun(cluster, tmp_path):
    trainer = Trainer(load_config(None, [*COTRAIN, f"output_dir={tmp_path / 'run'}"]))
    players, _ = trainer.players(0, 4)
    frozen = {side: p for side, p in players[0].items()}
    marker = tmp_path / "killed"
    # group 2's user dies mid-step in its worker; the other groups' players are the same but unharmed
    groups = [RolloutGroup(7 + g, frozen) for g in range(4)]
    doomed = [*groups[:2], RolloutGroup(9, {**frozen, "user": killed_once(frozen["user"], marker)}), groups[3]]
    rollout = RayRollout("PersuasionActs", local=trainer.rollout, workers=2, max_restarts=1, max_task_retries=1)
    try:
        pids = set(rollout.worker_pids())
        expected = rollout(trainer.make_env, groups, group_size=4, split="train", key=(0, 1, 0))
        survived = rollout(trainer.make_env, doomed, group_size=4, split="train", key=(0, 1, 0))
        assert int(marker.read_text()) in pids, "a rollout worker was killed"
        assert pids - set(rollout.worker_pids()), "the killed worker was restarted in a new process"
    finally:
        rollout.close()
    assert [e.group for e in survived] == [g for g in range(4) for _ in range(4)]
    assert outcome(survived) == outcome(expected)


def test_cotraining_runs_end_to_end_on_two_nodes(cluster, tmp_path):
    in_process = Trainer(load_config(None, [*COTRAIN, f"output_dir={tmp_path / 'local'}"])).run(progress=False)
    trainer = Trainer(load_config(None, [*COTRAIN, "ray_address=auto", f"output_dir={tmp_path / 'ray'}"]))
    assert isinstance(trainer.rollout, RayRollout)
    nodes = {ray.get(w.node.remote()) for w in trainer.rollout.workers}
    on_ray = trainer.run(progress=False)
    assert len(nodes) == 2, "one rollout worker on each node"
    assert [r["step"] for r in on_ray] == [1, 2, 3] == [r["step"] for r in in_process]
    assert all(0.0 < r["entropy"] and "simulator/entropy" in r for r in on_ray)
    assert np.isfinite(on_ray[-1]["heldout_success"])
    # both trained, both checkpointed: a resumed trainer continues from the last checkpoint
    resumed = Trainer(load_config(None, [*COTRAIN, "ray_address=auto", f"output_dir={tmp_path / 'ray'}"]))
    assert resumed.resume() and resumed.step == 3
    trainer.rollout.close()
    resumed.rollout.close()


@pytest.mark.slow
def test_a_learner_killed_on_ray_resumes_exactly(tmp_path):
    """`scope train --ray` SIGKILLed mid-rollout and mid-update: `--resume` ends where an unbroken run ends."""
    config = [*COTRAIN, "steps=4", "checkpoint_every=2", "keep_checkpoints=5", "ray_workers=2"]
    whole = tmp_path / "whole"
    assert run_cli([*config, f"output_dir={whole}", "--ray"]).returncode == 0
    expected = trained_state(whole)
    for point in ("rollout@3", "update_agent@3"):
        out = tmp_path / point.replace("@", "-")
        crashed = run_cli([*config, f"output_dir={out}", "--ray"], **{ENV_VAR: point})
        assert crashed.returncode == -9, f"{point} did not fire: {crashed.stderr[-500:]}"
        resumed = run_cli([*config, f"output_dir={out}", "--ray", "--resume"])
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        weights, optimizers = trained_state(out)
        assert weights.keys() == expected[0].keys() == {"agent", "user"}
        for side in weights:
            assert torch.equal(weights[side]["weight"], expected[0][side]["weight"]), point
            assert torch.equal(optimizers[side]["state"][0]["exp_avg"], expected[1][side]["state"][0]["exp_avg"]), point
        assert history(out) and [r["step"] for r in history(out)] == [1, 2, 3, 4]


def test_an_override_taken_for_the_ray_address_is_refused():
    """`scope train CONFIG --ray key=value` would read `key=value` as the address: a clear error instead."""
    with pytest.raises(ValueError, match="not a Ray address"):
        load_config(None, ["env=PersuasionActs", "ray_address=steps=1"])
    assert load_config(None, ["env=PersuasionActs", "ray_address=auto"]).ray_address == "auto"
