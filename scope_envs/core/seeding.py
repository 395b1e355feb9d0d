"""One seed derivation for everything random in SCOPE: reply seeds, episode seeds, group seeds."""

from __future__ import annotations

import numpy as np

MAX_SEED = 2**31 - 1


def derive_seed(*parts: int) -> int:
    """A seed in `[0, MAX_SEED)` determined by `parts` alone (e.g. an episode seed and a turn's
    position, or a run seed, a step and a group): stateless and reproducible."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] % MAX_SEED)
