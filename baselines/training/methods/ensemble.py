"""`ensemble`: one side trains against fixed simulators, one per group, round-robin."""

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
        return Ensemble(self.partners(trainer), mode="round_robin")

    def opponent_spec(self, label: str) -> str:
        """`simulatorN` is the N-th of `config.simulators`."""
        match = re.fullmatch(r"simulator(\d+)", label)
        simulators = list(self.config.simulators)
        if match is None or int(match.group(1)) >= len(simulators):
            return label
        return simulators[int(match.group(1))]
