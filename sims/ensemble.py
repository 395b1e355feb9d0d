"""`Ensemble`: K simulators, one per rollout group (round-robin or a seeded choice)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sims.registry import as_simulator


class Ensemble:
    """Picks the simulator of each rollout group; members may be specs, simulators or callables."""

    def __init__(self, members: Sequence[Any], *, mode: str = "round_robin", seed: int = 0) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one simulator")
        if mode not in {"round_robin", "random"}:
            raise ValueError(f"mode must be 'round_robin' or 'random', got {mode!r}")
        self.members = [as_simulator(m) for m in members]
        self.mode = mode
        self.seed = seed

    def index_for(self, group: int) -> int:
        if self.mode == "round_robin":
            return group % len(self.members)
        return int(np.random.default_rng([self.seed, group]).integers(len(self.members)))

    def pick(self, group: int) -> Any:
        """The simulator that plays every episode of rollout group `group`."""
        return self.members[self.index_for(group)]

    def __len__(self) -> int:
        return len(self.members)
