"""SCOPE dialogue envs as verifiers environments: the model under evaluation or training plays the
agent side, a SCOPE simulator spec plays the user, the env scores the episode.

    vf-eval baselines.integrations.verifiers_env --env.taskset.env ENV \\
        --env.taskset.simulator openai:gpt-5-mini -m MODEL --client.base-url URL -n 8 -r 4

verifiers (tested: `verifiers==0.4.0`, the `verifiers` extra) has one multi-turn API, `verifiers.v1`
(the 0.3 `MultiTurnEnv` is gone): an env is a `vf.Env` whose `run(task, agents)` relays turns
between agent interactions, a `vf.Taskset` yields its tasks and a `vf.Harness` is the program
that calls the model. `vf-eval ID` and prime-rl's env servers import a plugin id as a module
that exports one of each; this module is that plugin (its id is its import path):

* `ScopeTaskset` yields one task per scenario of the SCOPE env (`env`, a registered name; its
  task ids of `split`, or `episodes` seeded draws where it has none; `--env.taskset.*`);
* `ScopeEnv.run` resets the SCOPE env to the task and opens the agent's interaction on the
  agent's own view (its system prompt, and the user's opening turns where the user speaks
  first); each reply of the model is the agent's action, the user's answer comes from the
  simulator through the env (`scope_envs.core.views.AgentView`) and is the next user turn;
* `ScopeChatHarness`, the agent seat's default harness, is a tool-calling chat loop run in
  process (every model call goes through the run's interception endpoint, so verifiers
  records and, for training, tokenizes every turn); it offers the env's agent tools (a
  customer-service domain's) and has the env execute each call;
* the env's terminal reward is the trace's reward (`scope_reward`), its components are
  metrics; a conversation that verifiers ends first (a turn limit, an error) is ended as a
  truncation (`rollout_ended`) and scored by the env's own rules.

The user is a SCOPE simulator, not a verifiers agent: it never enters a trace as a policy,
so only the agent's tokens are training data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import ConfigDict, Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult

from scope_envs.core.chat import Message
from scope_envs.core.dialogue import AGENT
from scope_envs.core.views import AgentView, build_env

__all__ = ["ScopeChatHarness", "ScopeEnv", "ScopeTaskset"]

REWARD = "scope_reward"


class ScopeTasksetConfig(vf.TasksetConfig):
    env: str = ""
    """A registered SCOPE env (its name, as `scope envs` lists them); required. It has an empty
    default only because `vf-eval` builds the config from its id before it reads the command line."""
    simulator: str = "scripted"
    """The SCOPE simulator spec that plays the user (`scripted`, `openai:gpt-5-mini`, `vs[5]:...`)."""
    split: str = "train"
    episodes: int | None = None
    """How many tasks: the first `episodes` of the split's scenarios (all of them when unset)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the SCOPE env."""


class ScopeTaskData(vf.TaskData):
    task_id: str | None = None
    """The SCOPE scenario (`reset(options={"task_id": ...})`); None: the env draws one from `seed`."""
    seed: int = 0
    split: str = "train"


class ScopeState(vf.State):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    view: Any = Field(default=None, exclude=True)
    """The live SCOPE episode (an `AgentView`), for the harness to execute tool calls in."""


class ScopeTask(vf.Task[ScopeTaskData, ScopeState, vf.TaskConfig]):
    view: AgentView | None = None

    async def setup(self, trace: vf.Trace) -> None:
        trace.state.view = self.view


class ScopeTaskset(vf.Taskset[ScopeTask, ScopeTasksetConfig]):
    def load(self) -> Iterator[ScopeTask]:
        config = self.config
        if not config.env:
            raise ValueError("no SCOPE env named: set --env.taskset.env (one of `scope envs`)")
        dialogue = build_env(config.env, **config.env_kwargs)
        try:
            ids: list[str | None] = list(dialogue.task_ids(config.split)) if hasattr(dialogue, "task_ids") else []
        finally:
            dialogue.close()
        count = config.episodes if config.episodes is not None else len(ids)
        if not count:
            raise ValueError(f"{config.env} lists no tasks of split {config.split!r}: set --env.taskset.episodes")
        for i in range(count):
            task_id = ids[i % len(ids)] if ids else None
            yield ScopeTask(
                ScopeTaskData(
                    id=f"{config.env}/{config.split}/{task_id or i}",
                    name=task_id or f"{config.env}#{i}",
                    task_id=task_id,
                    seed=i,
                    split=config.split,
                ),
                config.task,
            )


class ScopeEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy under evaluation or training (`--env.agent.*`). Its harness defaults to
    `ScopeChatHarness` (the one this plugin ships), which runs in process and needs no sandbox:
    the runtime is a local one (verifiers' default is a remote Prime sandbox)."""


class ScopeEnv(vf.Env[ScopeEnvConfig]):
    async def run(self, task: ScopeTask, agents: vf.Agents) -> None:
        config: ScopeTasksetConfig = self.taskset.config
        view = await asyncio.to_thread(AgentView, config.env, config.simulator, **config.env_kwargs)
        try:
            await self._play(task, agents.agent, view)
        finally:
            view.close()

    async def _play(self, task: ScopeTask, agent: vf.Agent, view: AgentView) -> None:
        data = task.data
        options: dict[str, Any] = {"split": data.split}
        if data.task_id is not None:
            options["task_id"] = data.task_id
        await asyncio.to_thread(view.reset, seed=data.seed, options=options)
        dialogue = view.dialogue
        system, *opening = dialogue.views[AGENT]
        agent_task = task.with_data(
            system_prompt=system.text,
            prompt=[_to_vf(m) for m in opening],  # possibly empty: the agent speaks first
        )
        agent_task.view = view
        async with agent.interaction(agent_task) as chat:
            segment = await chat.turn()
            while not segment.terminated and dialogue.end is None:
                seen = len(dialogue.views[AGENT])
                await asyncio.to_thread(view.step, segment.last_reply)
                if dialogue.end is not None:
                    break
                heard = [m for m in dialogue.views[AGENT][seen:] if m.role == "user"]
                segment = await chat.turn([_to_vf(m) for m in heard])
        if dialogue.end is None:
            dialogue.abort("rollout_ended", "verifiers ended the agent's rollout before the conversation")
        info = dialogue.chat_infos[AGENT]["reward_info"]
        trace = chat.trace
        trace.record_reward(REWARD, float(info["reward"]), 1.0)
        for name, value in info.get("components", {}).items():
            trace.record_metric(f"scope/{name}", float(value))
        trace.info["scope"] = {
            "env": self.taskset.config.env,
            "task_id": data.task_id,
            "end": dialogue.end.reason,
            "terminated": dialogue.end.terminated,
            "turns": len(dialogue.log),
        }


class ScopeChatHarnessConfig(vf.HarnessConfig):
    max_tool_calls: int = 64
    """Tool calls one segment may make before its reply is taken as it is."""


class ScopeChatHarness(vf.Harness[ScopeChatHarnessConfig]):
    """A chat loop in process: the model speaks through the interception endpoint; a tool call
    is the agent's action in the SCOPE episode, whose answer goes back to the model."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        **_: Any,
    ) -> ProgramResult:
        view: AgentView = trace.state.view
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        tools = view.dialogue.chat_infos[AGENT]["tools"] or None
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            for _ in range(self.config.max_tool_calls + 1):
                completion = await client.chat.completions.create(model=ctx.model, messages=messages, tools=tools)
                reply = completion.choices[0].message
                if not reply.tool_calls:
                    break
                wire = reply.model_dump(exclude_none=True)
                messages.append(wire)
                seen = len(view.dialogue.views[AGENT])
                await asyncio.to_thread(view.step, Message.from_openai(wire))
                messages += [m.to_openai() for m in view.dialogue.views[AGENT][seen:] if m.role == "tool"]
                if view.dialogue.end is not None:
                    break
        return ProgramResult(exit_code=0, stdout="", stderr="")


def _to_vf(message: Message) -> vf.Message:
    from verifiers.v1.dialects import parse_message

    return parse_message(message.to_openai())
