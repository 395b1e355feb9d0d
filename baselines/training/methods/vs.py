"""`vs`: the fixed simulators, each answering through Verbalized Sampling (`vs_k`, `vs_draw`)."""

from __future__ import annotations

from typing import Any

from baselines.training.methods.ensemble import EnsembleMethod
from scope_envs.core.specs import wrapped
from sims.verbalized import verbalize


class VerbalizedSamplingMethod(EnsembleMethod):
    def partners(self, trainer: Any) -> list[Any]:
        config = self.config
        return [verbalize(p, k=config.vs_k, draw=config.vs_draw) for p in super().partners(trainer)]

    def opponent_spec(self, label: str) -> str:
        spec = super().opponent_spec(label)
        return wrapped("vs", spec, self.config.vs_k) if spec != label else label
