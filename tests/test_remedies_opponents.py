"""Who plays each group, as the paper's release runs it: an ensemble's members share a run fairly
whatever the groups per step, a population draws one member per rollout batch by default (per
group on request) with no live floor, and the pool's diversity is logged."""

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from training_helpers import TINY_POPULATION

from baselines.training.config import TrainConfig, load_config
from baselines.training.methods import method_for
from scope_envs.core.dialogue import USER
from scope_envs.persuasion_acts import PersuasionActsEnv
from sims.opponents import LIVE, Ensemble, Population
from sims.pool import CheckpointPool

THREE = [lambda m, t: "a", lambda m, t: "b", lambda m, t: "c"]


def counts(opponents, steps: int, groups: int) -> list[int]:
    played = Counter(opponents.pick(step, group)[0] for step in range(steps) for group in range(groups))
    return [played[f"simulator{index}"] for index in range(3)]


@pytest.mark.parametrize(("groups", "steps", "expected"), [(2, 10, [7, 7, 6]), (4, 100, [134, 133, 133])])
def test_round_robin_counts_groups_across_steps(groups, steps, expected):
    assert counts(Ensemble(THREE, groups=groups), steps, groups) == expected
    # the method builds its ensemble with the config's groups per step
    config = load_config(
        None,
        [
            "env=PersuasionActs",
            "method=ensemble",
            "simulators=[family:0@3, family:1@3, family:2@3]",
            f"groups_per_step={groups}",
        ],
    )
    opponents = method_for(config).opponents(SimpleNamespace(probe=PersuasionActsEnv()))
    assert counts(opponents, steps, groups) == expected


def test_random_mode_varies_between_steps_and_replays():
    ensemble = Ensemble(THREE, mode="random", seed=3, groups=8)
    picks = [[ensemble.index_for(step, group) for group in range(8)] for step in range(20)]
    assert len({tuple(step) for step in picks}) > 1  # not the same draw every step
    again = Ensemble(THREE, mode="random", seed=3, groups=8)
    assert picks == [[again.index_for(step, group) for group in range(8)] for step in range(20)]
    other = Ensemble(THREE, mode="random", seed=4, groups=8)
    assert picks != [[other.index_for(step, group) for group in range(8)] for step in range(20)]
    assert set(Counter(i for step in picks for i in step)) == {0, 1, 2}


def test_an_ensemble_run_logs_each_members_groups(tmp_path):
    from baselines.training.trainer import Trainer

    config = load_config(
        None,
        [
            "env=PersuasionActs",
            "policy=linear",
            "method=ensemble",
            "simulators=[family:0@3, family:1@3, family:2@3]",
            "eval_simulators=[family:100]",
            "groups_per_step=2",
            "group_size=2",
            "steps=5",
            "eval_every=100",
            "eval_tasks=1",
            "tensorboard=false",
            f"output_dir={tmp_path}",
        ],
    )
    Trainer(config).run(progress=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    totals = [sum(r[f"groups/simulator{index}"] for r in records) for index in range(3)]
    assert totals == [4, 3, 3] and all(sum(r[f"groups/simulator{i}"] for i in range(3)) == 2 for r in records)


# ---- the population's draw ---------------------------------------------------------------------------


def pool_of(tmp_path: Path, snapshots: int) -> CheckpointPool:
    pool = CheckpointPool(tmp_path / "pool", max_size=snapshots, loader=lambda path: path.name)
    for step in range(snapshots):
        pool.add(lambda directory: Path(directory).mkdir(parents=True, exist_ok=True), step=step)
    return pool


def test_a_batch_draw_gives_every_group_of_a_step_one_member(tmp_path):
    pool = pool_of(tmp_path, 4)
    batch = Population(pool, "LIVE", seed=0, groups=4)
    assert batch.draw == "batch"
    steps = [[batch.pick(step, group)[0] for group in range(4)] for step in range(500)]
    assert all(len(set(labels)) == 1 for labels in steps)
    shares = Counter(labels[0] for labels in steps)
    assert set(shares) == {LIVE, "snapshot@0", "snapshot@1", "snapshot@2", "snapshot@3"}
    assert all(abs(count / 500 - 0.2) < 0.07 for count in shares.values())  # uniform over the 4 and the live one
    again = Population(pool, "LIVE", seed=0, groups=4)
    assert steps == [[again.pick(step, group)[0] for group in range(4)] for step in range(500)]
    per_group = Population(pool, "LIVE", seed=0, groups=4, draw="group")
    mixed = [[per_group.pick(step, group)[0] for group in range(4)] for step in range(50)]
    assert sum(len(set(labels)) > 1 for labels in mixed) > 25
    with pytest.raises(ValueError, match="draw must be one of"):
        Population(pool, "LIVE", draw="step")


def test_the_population_defaults_are_the_papers(tmp_path):
    config = TrainConfig()
    assert (config.pool_draw, config.live_min_share, config.pool_size, config.pool_every) == ("batch", 0.0, 10, 16)
    assert config.vs_draw == "random" and config.tool_error_penalty == 0.1
    with pytest.raises(ValueError, match="pool_draw must be one of"):
        load_config(None, ["env=PersuasionActs", "method=population", "pool_draw=step"])
    method = method_for(load_config(None, ["env=PersuasionActs", "method=population", "pool_draw=group"]))
    method.pool = pool_of(tmp_path, 2)
    trainer = SimpleNamespace(learners={USER: SimpleNamespace(policy="LIVE")})
    population = method.opponents(trainer)
    assert (population.draw, population.live_groups) == ("group", 0)


# ---- the pool's diversity -------------------------------------------------------------------------------


def test_reply_diversity_is_the_mean_pairwise_total_variation():
    pytest.importorskip("torch")
    from baselines.training.act_policy import ActPolicy
    from baselines.training.methods.population import reply_diversity

    features = np.array([[0.0], [1.0], [2.0]])
    mask = np.ones((3, 2), bool)
    uniform = ActPolicy(1, 2)
    leaning = ActPolicy(1, 2, weights=np.array([[1.0], [0.0]]))
    first = 1 / (1 + np.exp(-features[:, 0]))  # the leaning policy's probability of act 0
    np.testing.assert_allclose(leaning.act_distribution(features, mask)[:, 0], first)
    assert reply_diversity([uniform, ActPolicy(1, 2)], features, mask) == 0.0
    assert reply_diversity([uniform], features, mask) == 0.0
    expected = np.mean(np.abs(first - 0.5))  # TV of two distributions over two acts: |p0 - q0|
    assert reply_diversity([uniform, leaning], features, mask) == pytest.approx(expected, abs=1e-12)
    three = reply_diversity([uniform, leaning, leaning], features, mask)
    assert three == pytest.approx(2 * expected / 3, abs=1e-12)
    masked = np.array([[True, False]] * 3)  # one allowed act: every policy gives it, no distance
    assert reply_diversity([uniform, leaning], features, masked) == 0.0


def test_probe_states_are_the_steps_simulator_turns_capped_evenly():
    from baselines.training.methods.population import probe_states
    from scope_envs.core.rollout import ActSample

    def episode(turns, offset):
        features = np.arange(turns, dtype=float)[:, None] + offset
        sample = ActSample(
            ids=[0, *[1] * turns],
            mask=[0, *[1] * turns],
            logprobs=[0.0] * (turns + 1),
            prompt_length=1,
            features=features,
            allowed=np.ones((turns, 2), bool),
        )
        return SimpleNamespace(samples={USER: [sample]})

    episodes = [episode(100, 1000 * index) for index in range(5)]
    features, allowed = probe_states(episodes)
    assert features.shape == (256, 1) and allowed.shape == (256, 2)
    assert features[0, 0] == 0 and features[-1, 0] == 4099
    np.testing.assert_array_equal(features, probe_states(episodes)[0])
    few, _ = probe_states(episodes[:1], limit=256)
    assert len(few) == 100
    assert len(probe_states([SimpleNamespace(samples={})])[0]) == 0


def test_a_population_run_logs_its_pools_diversity(tmp_path):
    pytest.importorskip("torch")
    from baselines.training.trainer import Trainer

    def run(simulator_lr: float) -> list[dict]:
        config = load_config(
            None,
            [
                *TINY_POPULATION,
                "groups_per_step=4",
                "group_size=4",
                f"simulator_lr={simulator_lr}",
                "pool_size=3",
                "live_min_share=0.5",
                "steps=4",
                f"output_dir={tmp_path / str(simulator_lr)}",
            ],
        )
        return Trainer(config).run(progress=False)

    frozen = run(0.0)  # every snapshot and the live simulator have the initial weights
    assert [r["pool/diversity"] for r in frozen] == [0.0] * 4
    assert [r["pool/size"] for r in frozen] == [1, 2, 3, 3]
    trained = run(0.5)  # the live simulator plays half the groups of every step and moves away
    assert all(r["pool/diversity"] > 0.0 for r in trained)
