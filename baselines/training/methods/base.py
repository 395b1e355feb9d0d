"""`Method`: what a training method declares, and the defaults most methods keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scope_envs.core.dialogue import other_side

if TYPE_CHECKING:
    from scope_envs.core.rollout import Episode
    from sims.opponents import Opponents


@dataclass(frozen=True)
class LearnerSpec:
    """One side the method trains: its initial policy spec, learning rate, KL coefficient and
    the offset of its seed from the run's."""

    policy: str
    lr: float
    kl_coef: float
    seed_offset: int = 0


@dataclass(frozen=True)
class MemoryTerms:
    """What a method keeps on the device, for `scope plan`: the model spec of each trained side,
    and how many snapshots of `snapshot_side` are resident at once."""

    models: dict[str, str]
    resident_snapshots: int = 0
    snapshot_side: str = "user"


class Method:
    """A method with the defaults of plain RL: the config's `side` trains against the simulators
    the subclass names in `opponents`, on the rewards the env gives it."""

    def __init__(self, config: Any) -> None:
        self.config = config

    @property
    def side(self) -> str:
        return self.config.side

    @property
    def partner_side(self) -> str:
        return other_side(self.config.side)

    # ---- what it declares -------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """What is wrong with the config for this method (checked by `TrainConfig.validate`)."""
        return []

    def learners(self) -> dict[str, LearnerSpec]:
        """The trained sides, the first being `config.side`."""
        config = self.config
        return {self.side: LearnerSpec(config.policy, config.lr, config.kl_coef)}

    def opponents(self, trainer: Any) -> Opponents:
        """Who plays the side no learner plays, per group (`sims.opponents`); `trainer` gives the
        learners, the run folder and a probe env."""
        raise NotImplementedError

    def opponent_spec(self, label: str) -> str:
        """The spec of the opponent an `opponents().pick` label names (saved with episodes)."""
        return label

    def memory(self) -> MemoryTerms:
        return MemoryTerms({side: spec.policy for side, spec in self.learners().items()})

    # ---- rewards of a learner ---------------------------------------------------------------------

    def rewards(self, side: str, members: list[Episode]) -> np.ndarray:
        """The rewards the learner of `side` is trained on, for one group."""
        return np.array([e.rewards[side] for e in members])

    def advantage_estimator(self, side: str) -> str:
        return self.config.advantage

    # ---- around the loop --------------------------------------------------------------------------

    def start(self, trainer: Any) -> None:
        """Called once the learners exist (state of the method's own: a pool)."""

    def start_fresh(self, trainer: Any) -> None:
        """A fresh start cleared the run folder: forget what an earlier run left."""

    def resumed(self, trainer: Any, step: int) -> None:
        """The run continues from the checkpoint of `step`."""

    def following(self, trainer: Any) -> None:
        """A rank other than 0 of a learner group starts following rank 0."""

    def step_metrics(self, trainer: Any, step: int, labels: list[str], episodes: list[Episode]) -> dict[str, float]:
        """What the method adds to the metrics line of a training step (after the updates)."""
        return {}

    def after_step(self, trainer: Any, step: int) -> None:
        """After step `step` (counted from 1) was taken, before evaluation and the checkpoint."""

    def saved(self, trainer: Any, step: int) -> None:
        """After the checkpoint of `step` was written and the checkpoints beyond `keep_checkpoints`
        pruned (`trainer.folder.checkpoint_steps()` are those a resume may still start from)."""
