"""`vs`: the fixed simulators, each answering through Verbalized Sampling (`vs_k`, `vs_draw`: the
candidate drawn uniformly, the paper's main runs, or by its verbalized probability, its ablation)."""

from __future__ import annotations

from typing import Any

from baselines.training.methods.ensemble import EnsembleMethod
from scope_envs.core.specs import wrapped
from sims.verbalized import SPEC_WRAPPER_OF_DRAW, verbalize


class VerbalizedSamplingMethod(EnsembleMethod):
    def partners(self, trainer: Any) -> list[Any]:
        config = self.config
        return [verbalize(p, k=config.vs_k, draw=config.vs_draw) for p in super().partners(trainer)]

    def opponent_spec(self, label: str) -> str:
        """The member's spec in the wrapper that draws as `vs_draw` does (`vs5:SPEC`, `vsprob5:SPEC`)."""
        spec = super().opponent_spec(label)
        return wrapped(SPEC_WRAPPER_OF_DRAW[self.config.vs_draw], spec, self.config.vs_k) if spec != label else label
