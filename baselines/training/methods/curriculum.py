"""`curriculum`: co-training whose simulator is rewarded for a group of varied outcomes, the
curriculum reward (`baselines.training.advantages.curriculum_reward`), whatever `simulator_reward` says;
`method: cotrain` with `simulator_reward: curriculum` is the same run."""

from __future__ import annotations

from baselines.training.methods.cotrain import CURRICULUM, CoTrain


class Curriculum(CoTrain):
    def simulator_reward(self) -> str:
        return CURRICULUM
