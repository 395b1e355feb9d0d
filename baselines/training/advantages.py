"""Advantage estimators over rollout groups, and the curriculum reward of a simulator.

A group is G episodes of one scenario against one simulator checkpoint, so a group baseline
never mixes scenarios or simulators.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

ESTIMATORS = ("grpo", "dr_grpo", "rae", "none")


def grpo(rewards: np.ndarray, *, scale_std: bool = True, eps: float = 1e-6) -> np.ndarray:
    """r - mean(group), divided by the group's standard deviation when `scale_std`."""
    rewards = np.asarray(rewards, dtype=float)
    centred = rewards - rewards.mean()
    return centred / (rewards.std() + eps) if scale_std else centred


def dr_grpo(rewards: np.ndarray) -> np.ndarray:
    """Dr. GRPO: r - mean(group), no std scaling (pair it with the `constant` loss aggregation)."""
    return grpo(rewards, scale_std=False)


@dataclass
class RunningBaseline:
    """RAE: a moving baseline per (role, simulator) key, updated with each group's mean reward
    after the group's advantages are computed (so a group never sees its own rewards in it)."""

    decay: float = 0.9
    values: dict[Hashable, float] = field(default_factory=dict)

    def advantages(self, rewards: np.ndarray, key: Hashable) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=float)
        baseline = self.values.get(key, float(rewards.mean()))
        self.values[key] = self.decay * baseline + (1 - self.decay) * float(rewards.mean())
        return rewards - baseline


@dataclass
class StepBaseline(RunningBaseline):
    """RAE whose baseline holds still within a training step: every group of a step is compared
    with the value the baseline of its key had when the step began (in the first step, the first
    group's mean), so a step's advantages order its groups exactly as their rewards, and equal
    rewards get equal advantages, whatever order the groups are visited in. `end_step()` folds the
    step's group means in, in order, with the same decay as `RunningBaseline`; call it after each
    step's updates (before a checkpoint saves `values`)."""

    _start: dict[Hashable, float] = field(default_factory=dict)
    _means: dict[Hashable, list[float]] = field(default_factory=dict)

    def advantages(self, rewards: np.ndarray, key: Hashable) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=float)
        baseline = self._start.setdefault(key, self.values.get(key, float(rewards.mean())))
        self._means.setdefault(key, []).append(float(rewards.mean()))
        return rewards - baseline

    def end_step(self) -> None:
        for key, means in self._means.items():
            value = self._start[key]
            for mean in means:
                value = self.decay * value + (1 - self.decay) * mean
            self.values[key] = value
        self._start.clear()
        self._means.clear()


def group_advantages(
    rewards: np.ndarray,
    estimator: str,
    *,
    key: Hashable = None,
    baseline: RunningBaseline | None = None,
    scale_std: bool = True,
) -> np.ndarray:
    if estimator == "grpo":
        return grpo(rewards, scale_std=scale_std)
    if estimator == "dr_grpo":
        return dr_grpo(rewards)
    if estimator == "rae":
        if baseline is None:
            raise ValueError("the rae estimator needs a RunningBaseline")
        return baseline.advantages(rewards, key)
    if estimator == "none":
        return np.asarray(rewards, dtype=float)
    raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {ESTIMATORS}")


def curriculum_reward(agent_rewards: np.ndarray, target: float = 0.25, width: float = 0.02) -> float:
    """exp(-(Var_group(r_agent) - target)^2 / width): highest when the agent's group reward
    variance is at its maximum for rewards in [0, 1] (0.25), i.e. the simulator is neither too
    easy nor too hard for the agent. One number per group; co-training subtracts the tool-error
    penalty per episode (`baselines.training.methods.cotrain`)."""
    variance = float(np.var(np.asarray(agent_rewards, dtype=float)))
    return float(np.exp(-((variance - target) ** 2) / width))
