"""`single`: RL against one frozen simulator."""

from __future__ import annotations

from baselines.training.methods.ensemble import EnsembleMethod


class Single(EnsembleMethod):
    def problems(self) -> list[str]:
        count = len(self.config.simulators)
        return [] if count == 1 else [f"method 'single' trains against exactly one simulator, got {count}"]
