"""`Tau2Env`: the tau2-bench retail and airline domains as two-sided dialogue environments.

The agent is tau2's customer-service agent: tau2's agent system prompt with the domain policy,
the domain's tools (tau2's own code, run against the episode's copy-on-write database). The user
is tau2's user simulator: tau2's user-simulation guidelines and the task's user scenario. tau2's
fixed greeting opens the conversation, then the user speaks.

The episode ends (terminated) when the user says `###STOP###`, `###TRANSFER###` or
`###OUT-OF-SCOPE###`, when the agent says `###STOP###`, or when the agent transfers the user to
a human (`transfer_to_human_agents`, unless `end_on_transfer=False`); the turn limit (30 by
default) and the error budget truncate it. The reward is tau2's (see `scope_envs.tau2.reward`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scope_envs.core.chat import Message, ToolCall
from scope_envs.core.dialogue import (
    AGENT,
    USER,
    USER_REWARDS,
    DialogueEnv,
    EpisodeEnd,
    Reward,
    Scenario,
    ToolResult,
    user_components,
    user_reward_from,
)
from scope_envs.core.tools import ToolError
from scope_envs.tau2.calculate import check_expression
from scope_envs.tau2.domain import DEFAULT_TASK_SET, Tau2Domain, load_domain
from scope_envs.tau2.prompts import (
    AGENT_STOP,
    TRANSFER_TOOL,
    USER_OUT_OF_SCOPE,
    USER_STOP,
    USER_TRANSFER,
    agent_system_prompt,
    first_agent_message,
    user_system_prompt,
)
from scope_envs.tau2.reward import Evaluation, JudgeError, evaluate, judged_in_reward
from scope_envs.tau2.trajectory import to_tau2_messages

USER_END_TOKENS = ((USER_STOP, "user_stop"), (USER_TRANSFER, "user_transfer"), (USER_OUT_OF_SCOPE, "user_out_of_scope"))


class Tau2Env(DialogueEnv):
    """A tau2-bench domain; see the module docstring and docs/envs/tau2.md."""

    metadata = {**DialogueEnv.metadata, "name": "tau2_v0"}  # noqa: RUF012
    scripted_policies = {  # noqa: RUF012
        "user": "scope_envs.tau2.scripted:ScriptedTau2User",
        "agent": "scope_envs.tau2.scripted:GoldActionsAgent",
    }
    default_domain: str | None = None

    def __init__(
        self,
        *,
        domain: str | None = None,
        task_set: str = DEFAULT_TASK_SET,
        split: str = "train",
        user_reward: str = "cooperative",
        nl_judge: Any = None,
        end_on_transfer: bool = True,
        **kwargs: Any,
    ) -> None:
        domain = domain or self.default_domain
        if domain is None:
            raise ValueError("pass domain='retail' or domain='airline'")
        if user_reward not in USER_REWARDS:
            raise ValueError(f"user_reward must be one of {USER_REWARDS}, got {user_reward!r}")
        kwargs.setdefault("max_turns", 30)
        kwargs.setdefault("max_errors", 10)
        super().__init__(**kwargs)
        self.domain: Tau2Domain = load_domain(domain, task_set)  # raises naming the `tau2` extra
        self.domain.split(split)
        self.split = split
        self.user_reward = user_reward
        self.end_on_transfer = end_on_transfer
        self.nl_judge = nl_judge
        self.db: Any = None
        self.environment: Any = None
        self.task: Any = None
        self.executed_calls: list[Any] = []

    @property
    def nl_judge(self) -> Any:
        return self._nl_judge

    @nl_judge.setter
    def nl_judge(self, judge: Any) -> None:
        if isinstance(judge, str) or (judge is not None and not hasattr(judge, "respond")):
            from scope_envs.core.policy import resolve_policy

            judge = resolve_policy(judge)
        self._nl_judge = judge

    def task_ids(self, split: str | None = None) -> list[str]:
        """The task ids of a split (`"train"`, `"test"` or `"base"`), in tau2's order."""
        return list(self.domain.split(split or self.split))

    # ---- scenario ---------------------------------------------------------------------------

    def load_scenario(self, rng: np.random.Generator, options: Mapping[str, Any]) -> Scenario:
        split = options.get("split", self.split)
        task_id = options.get("task_id")
        if task_id is None:
            candidates = self.domain.split(split)
            task = self.domain.task(candidates[int(rng.integers(len(candidates)))])
        else:
            task = self.domain.task(task_id)
            split = next((name for name in ("train", "test") if task.id in self.domain.splits.get(name, ())), "base")
        if task.initial_state is not None:
            raise ValueError(
                f"tau2 task {task.id} starts from an initial state, which no retail or airline task uses; not supported"
            )
        if self.nl_judge is None and judged_in_reward(task):
            raise ValueError(
                f"tau2 {self.domain.task_set} task {task.id} scores NL assertions: "
                "pass nl_judge= (a chat policy) to the env"
            )
        self.task = task
        self.db = self.domain.fork_db()
        self.environment = self.domain.environment(self.db)
        self.executed_calls = []
        return Scenario(
            scenario_id=f"{self.domain.name}/{task.id}",
            system_prompts={
                AGENT: agent_system_prompt(self.domain.policy),
                USER: user_system_prompt(task.user_scenario),
            },
            tools={AGENT: [dict(schema) for schema in self.domain.tool_schemas], USER: []},
            first_speaker=AGENT,
            opening=((AGENT, first_agent_message()),),
            data={"task": task},
            metadata={"domain": self.domain.name, "task_id": task.id, "split": split, "task_set": self.domain.task_set},
        )

    # ---- tools and turns ----------------------------------------------------------------------

    def call_tool(self, side: str, call: ToolCall) -> str | ToolResult:
        from tau2.data_model.message import ToolCall as Tau2ToolCall

        if call.name == "calculate" and isinstance(call.args.get("expression"), str):
            check_expression(call.args["expression"])
        tau2_call = Tau2ToolCall(id=call.id, name=call.name, arguments=call.args, requestor="assistant")
        response = self.environment.get_response(tau2_call)  # tau2's own execution and serialisation
        self.executed_calls.append(tau2_call)
        if response.error:
            raise ToolError(response.content.removeprefix("Error: "))
        if call.name == TRANSFER_TOOL and self.end_on_transfer:
            return ToolResult(response.content, end_reason="agent_transfer")
        return response.content

    def end_reason(self, side: str, message: Message) -> str | None:
        text = message.text
        if side == USER:
            for token, reason in USER_END_TOKENS:
                if token in text:
                    return reason
        elif AGENT_STOP in text:
            return "agent_stop"
        return None

    # ---- reward -------------------------------------------------------------------------------

    def evaluate(self, end: EpisodeEnd | None = None) -> Evaluation:
        """tau2's reward for the episode so far, as if it had ended with `end` (default: how it ended)."""
        end = end or self.end
        if end is None or self.task is None:
            raise RuntimeError("evaluate() needs a finished episode, or an explicit EpisodeEnd")
        agent_contents = [
            message.text if message.content is not None else None
            for side, message in self.log
            if side == AGENT and message.role == "assistant"
        ]
        return evaluate(
            self.domain,
            self.task,
            self.db,
            stopped=end.terminated,
            end_reason=end.reason,
            agent_contents=agent_contents,
            tool_calls=self.executed_calls,
            environment=self.environment,
            judge=self.nl_judge,
            trajectory=self.tau2_messages,
        )

    def compute_rewards(self, end: EpisodeEnd) -> dict[str, Reward]:
        try:
            result = self.evaluate(end)
        except JudgeError as error:
            # the judge failed, not the conversation: the episode ends as a policy's failure would
            # (read back by the transition being built), so its reward is never trained on
            self.end = EpisodeEnd(error.end_reason, terminated=False, detail=str(error))
            result = Evaluation(0.0, {}, {"ended_by": end.reason, "judge_error": str(error)})
        user_value = user_reward_from(result.reward, self.user_reward)
        return {
            AGENT: Reward(result.reward, result.components, result.details),
            USER: Reward(
                user_value,
                user_components(result.components, self.user_reward),
                {**result.details, "user_reward": self.user_reward},
            ),
        }

    def tau2_messages(self) -> list[Any]:
        """The conversation so far as tau2 messages (what tau2's evaluators read)."""
        return to_tau2_messages(self.log, {call.id for call in self.executed_calls})


class Tau2RetailEnv(Tau2Env):
    """tau2-bench retail: `scope/Tau2Retail-v0` and `scope/Tau2Retail-User-v0`."""

    default_domain = "retail"


class Tau2AirlineEnv(Tau2Env):
    """tau2-bench airline: `scope/Tau2Airline-v0` and `scope/Tau2Airline-User-v0`."""

    default_domain = "airline"


def parallel_env(domain: str = "retail", **kwargs: Any) -> Tau2Env:
    """The PettingZoo parallel env (`possible_agents == ["agent", "user"]`)."""
    return Tau2Env(domain=domain, **kwargs)
