"""`cotrain`: the simulator is trained too, on its own turns of the same conversations, with its
own optimizer and a reward derived from the agent's (`simulator_reward`: adversarial 1 - r,
cooperative r, or the curriculum reward). It starts from, and is KL-anchored to, `simulator_policy`
(by default the agent's `policy`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from baselines.training.advantages import StepBaseline, curriculum_reward
from baselines.training.methods.base import LearnerSpec, Method
from baselines.training.policy import language_model_of
from scope_envs.core.dialogue import AGENT, USER, user_reward_from
from sims.opponents import Live

CURRICULUM = "curriculum"


class CoTrain(Method):
    def simulator_reward(self) -> str:
        return self.config.simulator_reward

    def problems(self) -> list[str]:
        config, problems = self.config, []
        if config.side != AGENT:
            problems.append("co-training trains the agent and the simulator: keep side 'agent'")
        if config.generation_engine == "vllm" and not language_model_of(config.simulator_policy or config.policy):
            problems.append("generation_engine 'vllm' serves the co-trained simulator too: use an hf: policy")
        return problems

    def learners(self) -> dict[str, LearnerSpec]:
        config = self.config
        lr = config.simulator_lr if config.simulator_lr is not None else config.lr
        simulator = LearnerSpec(config.simulator_policy or config.policy, lr, config.simulator_kl_coef, seed_offset=1)
        return {**super().learners(), USER: simulator}

    def start(self, trainer: Any) -> None:
        if self.simulator_reward() == CURRICULUM:
            trainer.learners[USER].baseline = StepBaseline(decay=self.config.rae_decay)

    def opponents(self, trainer: Any) -> Live:
        return Live(trainer.learners[USER].policy)

    def rewards(self, side: str, members: list[Any]) -> np.ndarray:
        """The simulator's rewards come from the agent's. The curriculum reward, as the paper has it:
        exp(-(Var_group(r_agent) - 0.25)^2 / 0.02), less `tool_error_penalty` once for each episode
        in which the simulator made at least one tool error."""
        if side == self.side:
            return super().rewards(side, members)
        agent = np.array([e.rewards[AGENT] for e in members])
        mode = self.simulator_reward()
        if mode != CURRICULUM:
            rewards = user_reward_from(agent, mode)
        else:
            penalty = self.config.tool_error_penalty * np.array([e.tool_errors[USER] > 0 for e in members])
            rewards = curriculum_reward(agent) - penalty
        # A simulator that broke the protocol keeps the worst reward the env gave it, whatever the mode.
        penalised = np.array([e.end_reason == "error_budget" and "penalty" in e.reward_info[USER] for e in members])
        return np.where(penalised, np.array([e.rewards[USER] for e in members]), rewards)

    def advantage_estimator(self, side: str) -> str:
        """The curriculum reward is one number per group (a function of the group's reward
        variance, less the per-episode penalty), so a group baseline would zero its advantages: it
        is compared with a running baseline across groups (`rae`, keyed by (side, opponent label)).
        That baseline is a `StepBaseline`, which holds still within a step: with RAE's baseline
        moving after every group, the first group of a run got advantage 0 and a step's groups of
        equal reward got different advantages, by the order they were visited in. A batch baseline
        (each group against the mean of the step's groups) would need every group's reward before
        the first advantage, which the trainer's per-group update does not give."""
        if side != self.side and self.simulator_reward() == CURRICULUM:
            return "rae"
        return super().advantage_estimator(side)

    def after_step(self, trainer: Any, step: int) -> None:
        baseline = trainer.learners[USER].baseline
        if isinstance(baseline, StepBaseline):
            baseline.end_step()
