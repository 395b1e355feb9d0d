"""Opponents: who plays the other side of each rollout group.

A GRPO group is G episodes of one scenario against one simulator checkpoint, so the choice is
made once per group: `pick(step, group)` returns a label (stable across a resumed run, used in
metrics and as the key of per-simulator baselines) and the policy that plays every episode of the
group. The kinds:

* `Ensemble`: fixed simulators, one per group, round-robin over the run's groups or a seeded
  choice per (step, group) (one member: a single fixed simulator; wrap members in Verbalized
  Sampling for the VS method);
* `Live`: the co-trained simulator itself, in every group;
* `Population`: the live simulator or one of its recent snapshots, drawn once per step (the
  paper's: one member per rollout batch) or per group from a FIFO `CheckpointPool`, whose `sample`
  makes the draw and whose `load` turns a snapshot into a policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from scope_envs.core.specs import resolve_policy
from sims.pool import CheckpointPool

LIVE = "live"
ENSEMBLE_MODES = ("round_robin", "random")
POOL_DRAWS = ("batch", "group")  # one member for every group of a step (the paper's), or one per group


class Opponents(Protocol):
    def pick(self, step: int, group: int) -> tuple[str, Any]:
        """The label and the policy of the player of group `group` at training step `step`."""
        ...


class Ensemble:
    """Picks the simulator of each rollout group; members may be specs, simulators or callables.

    `round_robin` counts the run's groups across steps, `(step * groups + group) % K` with `groups`
    the groups of a step (steps counted from 0, as the trainer passes them), so every member plays
    its share of the run however many groups a step has (K members, G groups a step: over S steps,
    each member plays floor or ceil of S * G / K groups), and a resumed run replays the same picks.
    `random` draws each group's member from a stream seeded by (seed, step, group)."""

    def __init__(self, members: Sequence[Any], *, mode: str = "round_robin", seed: int = 0, groups: int = 1) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one simulator")
        if mode not in ENSEMBLE_MODES:
            raise ValueError(f"mode must be one of {ENSEMBLE_MODES}, got {mode!r}")
        if groups < 1:
            raise ValueError(f"groups (per step) must be at least 1, got {groups}")
        self.members = [resolve_policy(m) for m in members]
        self.mode = mode
        self.seed = seed
        self.groups = groups

    def index_for(self, step: int, group: int) -> int:
        """The member that plays group `group` of step `step`."""
        if self.mode == "round_robin":
            return (step * self.groups + group) % len(self.members)
        return int(np.random.default_rng([self.seed, step, group]).integers(len(self.members)))

    def pick(self, step: int, group: int) -> tuple[str, Any]:
        index = self.index_for(step, group)
        return f"simulator{index}", self.members[index]

    def __len__(self) -> int:
        return len(self.members)


class Live:
    """The live co-trained simulator plays every group."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def pick(self, step: int, group: int) -> tuple[str, Any]:
        return LIVE, self.policy


class Population:
    """The live simulator or a pool snapshot, drawn by the pool (`CheckpointPool.sample`, over its
    snapshots and the live simulator) from a seeded stream: with `draw="batch"` (the paper's, one
    member per rollout batch) once per step, from (seed, step), and that member plays every group
    of the step; with `draw="group"` once per group, from (seed, step, group). A resumed run
    replays the same draws.

    A uniform draw over a pool of n snapshots and the live simulator leaves the live one, the only
    one that learns, 1/(n+1) of the groups (drawn per group at n = 4, a step of 4 groups has no live
    group about 41% of the time; drawn per batch, 80% of steps train no simulator). The paper has no
    floor; with `min_live_share` and the number of `groups` per step, at least ceil(share x groups)
    of each step's groups, chosen by a seeded permutation, are the live simulator's, and the others
    are drawn as above."""

    def __init__(
        self,
        pool: CheckpointPool,
        live: Any,
        *,
        seed: int = 0,
        min_live_share: float = 0.0,
        groups: int = 1,
        draw: str = "batch",
    ) -> None:
        if draw not in POOL_DRAWS:
            raise ValueError(f"draw must be one of {POOL_DRAWS}, got {draw!r}")
        self.pool = pool
        self.live = live
        self.seed = seed
        self.live_groups = math.ceil(min_live_share * groups - 1e-9)
        self.groups = groups
        self.draw = draw

    def pick(self, step: int, group: int) -> tuple[str, Any]:
        if self.live_groups and group < self.groups:
            order = np.random.default_rng([self.seed, step, 11]).permutation(self.groups)
            if group in order[: self.live_groups]:
                return LIVE, self.live
        key = [self.seed, step, 13] if self.draw == "batch" else [self.seed, step, group, 7]
        member = self.pool.sample(np.random.default_rng(key), include_live=True)
        if member is None:
            return LIVE, self.live
        return f"snapshot@{member.step}", self.pool.load(member)
