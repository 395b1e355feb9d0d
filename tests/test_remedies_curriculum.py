"""The curriculum reward as the paper has it (the tool-error penalty once per episode that had one)
and an advantage under which it ranks a step's groups on the act-level trainer path."""

from types import SimpleNamespace

import numpy as np
import pytest

from baselines.training.advantages import StepBaseline, curriculum_reward
from baselines.training.config import load_config
from baselines.training.methods import method_for
from scope_envs.core.dialogue import AGENT, USER

CURRICULUM = ["env=PersuasionActs", "method=cotrain", "simulator_reward=curriculum"]


def episode(agent_reward: float, tool_errors: int) -> SimpleNamespace:
    return SimpleNamespace(
        rewards={AGENT: agent_reward, USER: 0.0},
        tool_errors={AGENT: 0, USER: tool_errors},
        end_reason="done",
        reward_info={AGENT: {}, USER: {}},
    )


def test_the_tool_error_penalty_is_taken_once_per_episode_with_an_error():
    method = method_for(load_config(None, CURRICULUM))
    members = [episode(1.0, 3), episode(0.0, 1), episode(1.0, 0), episode(0.0, 0)]
    expected = curriculum_reward(np.array([1.0, 0.0, 1.0, 0.0])) - np.array([0.1, 0.1, 0.0, 0.0])
    np.testing.assert_allclose(method.rewards(USER, members), expected)


def test_a_step_baseline_holds_still_within_a_step():
    baseline = StepBaseline(decay=0.5)
    first = [baseline.advantages(np.full(2, r), "live")[0] for r in (1.0, 0.2, 0.2, 0.6)]
    assert first == pytest.approx([0.0, -0.8, -0.8, -0.4])  # all against the first group's mean
    baseline.end_step()
    assert baseline.values["live"] == pytest.approx(((1.0 * 0.5 + 0.1) * 0.5 + 0.1) * 0.5 + 0.3)
    second = [baseline.advantages(np.full(2, r), "live")[0] for r in (0.9, 0.1)]
    assert second == pytest.approx([0.9 - baseline.values["live"], 0.1 - baseline.values["live"]])


def test_curriculum_advantages_rank_a_steps_groups_on_the_act_level_trainer(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import baselines.training.trainer as trainer_module
    from baselines.training.trainer import Trainer

    config = load_config(
        None,
        [
            *CURRICULUM,
            "policy=linear",
            "simulator_policy=family:0@3",
            "simulators=[family:0@3]",
            "eval_simulators=[family:100]",
            "groups_per_step=3",
            "group_size=4",
            "lr=0",
            "simulator_lr=0",
            "tensorboard=false",
            f"output_dir={tmp_path}",
        ],
    )
    trainer = Trainer(config)
    simulator = trainer.learners[USER]
    recorded: dict[int, float] = {}
    original = trainer_module.group_advantages

    def recording(rewards, estimator, **kwargs):
        values = original(rewards, estimator, **kwargs)
        if kwargs["key"][0] == USER:
            recorded[len(recorded)] = float(values[0])
        return values

    monkeypatch.setattr(trainer_module, "group_advantages", recording)

    def step_advantages(step: int, agent_rewards: list[list[float]]) -> list[float]:
        players, labels = trainer.players(step, 3)
        assert labels == ["live"] * 3
        episodes = trainer.collect(step, group_size=4, split="train", players=players)
        for group, rewards in enumerate(agent_rewards):
            for member, reward in zip([e for e in episodes if e.group == group], rewards):
                member.rewards[AGENT] = reward
        recorded.clear()
        trainer.update(simulator, episodes, [0, 1, 2], labels)
        trainer.method.after_step(trainer, step + 1)
        return [recorded[group] for group in range(3)]

    varied, flat, mixed = [1.0, 0.0, 1.0, 0.0], [0.0] * 4, [1.0, 1.0, 1.0, 0.0]
    # curriculum rewards 1 (variance 0.25), 0.044 (variance 0): the two flat groups are alike
    first = step_advantages(0, [varied, flat, flat])
    assert first[1] == pytest.approx(first[2]) and first[1] < first[0]
    second = step_advantages(1, [flat, varied, mixed])
    rewards = [curriculum_reward(np.array(r)) for r in (flat, varied, mixed)]
    assert np.argsort(second).tolist() == np.argsort(rewards).tolist()  # ranked as their curriculum rewards
    assert second[0] < 0 < second[1]
    assert np.ptp(np.array(second) - np.array(rewards)) == pytest.approx(0.0, abs=1e-12)  # one baseline
