"""How far apart two act-level simulators reply: the mean per-state total-variation distance.

A simulator over discrete replies answers a batch of states (`features`, `mask`) with `act`. Where
it can state its reply distribution exactly (`distribution(features, mask)`, as the act-level
families do, Verbalized Sampling included) that is used; otherwise the distribution is estimated
from `draws` replies per state, which biases the distance upwards by about
`sqrt(replies / draws)`: pass enough draws, or give the simulator a `distribution`.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def reply_distribution(
    simulator: Any, features: np.ndarray, mask: np.ndarray, *, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """`[states, replies]`: each state's reply probabilities (exact where the simulator states them)."""
    if hasattr(simulator, "distribution"):
        return np.asarray(simulator.distribution(features, mask), dtype=float)
    states, replies = mask.shape
    repeated = np.repeat(np.arange(states), draws)
    chosen, _ = simulator.act(features[repeated], mask[repeated], rng)
    counts = np.zeros((states, replies))
    np.add.at(counts, (repeated, np.asarray(chosen)), 1.0)
    return counts / draws


def mean_total_variation(
    a: Any, b: Any, features: np.ndarray, mask: np.ndarray, *, draws: int = 2000, rng: np.random.Generator
) -> float:
    """The mean over states of half the L1 distance between the two simulators' reply distributions."""
    first = reply_distribution(a, features, mask, draws=draws, rng=rng)
    second = reply_distribution(b, features, mask, draws=draws, rng=rng)
    return float(0.5 * np.abs(first - second).sum(axis=1).mean())
