"""`ensemble`: one side trains against fixed simulators, one per group, round-robin over the run's
groups (`sims.opponents.Ensemble`), so each plays its share of the run whatever `groups_per_step` is."""

from __future__ import annotations

import re
from typing import Any

from baselines.training.methods.base import Method
from scope_envs.core.specs import make_policy
from sims.opponents import Ensemble


class EnsembleMethod(Method):
    def partners(self, trainer: Any) -> list[Any]:
        return [make_policy(spec, env=trainer.probe, side=self.partner_side) for spec in self.config.simulators]

    def opponents(self, trainer: Any) -> Ensemble:
        config = self.config
        return Ensemble(self.partners(trainer), mode="round_robin", seed=config.seed, groups=config.groups_per_step)

    def opponent_spec(self, label: str) -> str:
        """`simulatorN` is the N-th of `config.simulators`."""
        match = re.fullmatch(r"simulator(\d+)", label)
        simulators = list(self.config.simulators)
        if match is None or int(match.group(1)) >= len(simulators):
            return label
        return simulators[int(match.group(1))]

    def step_metrics(self, trainer: Any, step: int, labels: list[str], episodes: list[Any]) -> dict[str, float]:
        """`groups/simulatorN`: the groups each member played this step (0 included), whose sums over
        a run's metrics lines are each member's share of it."""
        return {
            f"groups/simulator{index}": labels.count(f"simulator{index}")
            for index in range(len(self.config.simulators))
        }
