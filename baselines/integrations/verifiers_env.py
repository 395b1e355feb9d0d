"""SCOPE dialogue envs as verifiers environments: the model under evaluation or training plays the
agent seat, the user seat, or both (two verifiers agents, each trace scored by its own side's
reward); a SCOPE policy spec plays any seat the model does not, the env scores the episode.

    vf-eval scope-verifiers --env.taskset.env ENV --env.taskset.simulator openai:gpt-5-mini \\
        -m MODEL --client.base-url URL -n 8 -r 4                          # the agent seat
    vf-eval scope-verifiers --env.seats user --env.taskset.env ENV \\
        --env.taskset.agent-policy scripted -m MODEL --client.base-url URL  # the user seat

verifiers (tested: `verifiers==0.4.0`, the `verifiers` extra) has one multi-turn API, `verifiers.v1`
(the 0.3 `MultiTurnEnv` is gone): an env is a `vf.Env` whose `run(task, agents)` relays turns
between agent interactions, a `vf.Taskset` yields its tasks and a `vf.Harness` is the program
that calls the model. `vf-eval ID` and prime-rl's env servers import a plugin id as a module
that exports one of each; `scope_verifiers` is that plugin:

* `ScopeTaskset` yields one task per scenario of the SCOPE env (`env`, a registered name; its
  task ids of `split`, or `episodes` seeded draws where it has none; `--env.taskset.*`);
* `ScopeEnv.run` resets the SCOPE env to the task; `--env.seats` names the seats verifiers'
  agents play (`agent`, `user` or `both`; the agents are `--env.agent.*` and `--env.user.*`);
  `--env.taskset.simulator` plays an unplayed user, `--env.taskset.agent-policy` an unplayed
  agent. Each seat's interaction opens on the seat's own view (its system prompt and what the
  other side said before its first turn) when it first speaks; each reply is the seat's action,
  and what the other side says next is the seat's next user turn;
* `ScopeChatHarness`, the default harness, is a tool-calling chat loop run in process (every
  model call goes through the run's interception endpoint, so verifiers records and, for
  training, tokenizes every turn); it offers the seat's tools (a customer-service domain's) and
  has the env execute each call. A seat with tools also gets them as a tool server
  (`verifiers_tools.SeatToolset`), so any harness that speaks MCP can call them;
* each seat's trace is scored by its own side's reward info: `scope_reward` (the env's reward of
  that side, weight 1) and each reward component (`success`, `donation`, a tool domain's `DB`, `ACTION`,
  `COMMUNICATE`, ...) as a reward of weight 0, re-weighted with verifiers' own
  `--env.taskset.task.rewards.NAME.weight W`; a conversation verifiers ends first (a turn limit,
  an error) is ended as a truncation (`rollout_ended`) and scored by the env's own rules;
* `--env.taskset.system-prompt FILE` replaces the SCOPE system prompt of the seat verifiers plays
  (with `--env.seats both`, the agent's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import ConfigDict, Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.runtimes import ProgramResult
from verifiers.v1.utils.decorators import discover_decorated
from verifiers.v1.utils.loaders import load_plugged_fn

from scope_envs.core.chat import Message
from scope_envs.core.dialogue import AGENT, USER, DialogueEnv, other_side
from scope_envs.core.views import AgentView, UserView, build_env

from .verifiers_tools import SeatToolset

__all__ = ["ScopeChatHarness", "ScopeEnv", "ScopeTaskset"]

REWARD = "scope_reward"
SEATS = {"agent": (AGENT,), "user": (USER,), "both": (AGENT, USER)}


class ScopeTasksetConfig(vf.TasksetConfig):
    env: str = ""
    """A registered SCOPE env (its name, as `scope envs` lists them); required. It has an empty
    default only because `vf-eval` builds the config from its id before it reads the command line."""
    simulator: str = "scripted"
    """The SCOPE simulator spec that plays the user seat when verifiers does not
    (`scripted`, `openai:gpt-5-mini`, `vs[5]:...`)."""
    agent_policy: str = "scripted"
    """The SCOPE policy spec that plays the agent seat when verifiers does not."""
    split: str = "train"
    episodes: int | None = None
    """How many tasks: the first `episodes` of the split's scenarios (all of them when unset)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of the SCOPE env (e.g. `user_reward`: `adversarial` or `cooperative`)."""


class ScopeTaskData(vf.TaskData):
    task_id: str | None = None
    """The SCOPE scenario (`reset(options={"task_id": ...})`); None: the env draws one from `seed`."""
    seed: int = 0
    split: str = "train"


class Episode:
    """A live SCOPE episode: the sides in `played` are verifiers' agents, a SCOPE policy plays
    the other side when there is one (through the Gymnasium view of the played side, so the
    episode is the one SCOPE plays with that view directly)."""

    def __init__(self, config: ScopeTasksetConfig, played: tuple[str, ...]) -> None:
        self.view: AgentView | UserView | None = None
        if played == (AGENT,):
            self.view = AgentView(config.env, config.simulator, **config.env_kwargs)
        elif played == (USER,):
            self.view = UserView(config.env, config.agent_policy, **config.env_kwargs)
        self.dialogue: DialogueEnv = self.view.dialogue if self.view else build_env(config.env, **config.env_kwargs)

    def reset(self, seed: int, options: dict[str, Any]) -> None:
        (self.view or self.dialogue).reset(seed=seed, options=options)

    def act(self, side: str, action: Any) -> None:
        if self.view is not None:
            self.view.step(action)
        else:
            self.dialogue.step({side: action, other_side(side): ""})

    def close(self) -> None:
        (self.view or self.dialogue).close()


@dataclass
class Seat:
    """One side of a live episode as a verifiers agent plays it."""

    episode: Episode
    side: str
    seen: int = 0
    """How much of the side's view its agent has been given."""

    @property
    def dialogue(self) -> DialogueEnv:
        return self.episode.dialogue

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.dialogue.chat_infos[self.side].get("tools") or []

    def news(self) -> list[Message]:
        """What the other side said since the seat last heard (its view's `user` turns)."""
        view = self.dialogue.views[self.side]
        new = [m for m in view[self.seen :] if m.role == "user"]
        self.seen = len(view)
        return new

    def act(self, action: Any) -> list[Message]:
        """Takes the seat's action; returns what the episode answered it with (tool messages)."""
        before = len(self.dialogue.views[self.side])
        self.episode.act(self.side, action)
        return [m for m in self.dialogue.views[self.side][before:] if m.role == "tool"]

    def outcome(self) -> dict[str, Any]:
        return self.dialogue.chat_infos[self.side].get("reward_info") or {}


class ScopeState(vf.State):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    seat: Any = Field(default=None, exclude=True)
    """The seat of the live SCOPE episode (a `Seat`), for the harness to execute tool calls in."""


class ScopeTask(vf.Task[ScopeTaskData, ScopeState, vf.TaskConfig]):
    seat: Seat | None = None

    async def setup(self, trace: vf.Trace) -> None:
        trace.state.seat = self.seat

    def hooks(self, attr: str) -> list[Any]:
        """The seat's reward and each of its components as `@vf.reward`s (the components with
        weight 0), which `--env.taskset.task.rewards.NAME.weight` re-weights like any reward."""
        if attr != "reward" or self.seat is None:
            return super().hooks(attr)
        outcome = self.seat.outcome()
        merged = {fn.__name__: fn for fn in discover_decorated(self, attr)}
        merged[REWARD] = _reward(REWARD, outcome.get("reward"), 1.0)
        merged |= {name: _reward(name, value, 0.0) for name, value in outcome.get("components", {}).items()}
        merged |= {
            name: load_plugged_fn(name, spec, attr, decorated=merged.get(name))
            for name, spec in self.config.rewards.items()
            if spec.fn or name in merged  # a weight for a component this env does not have weighs nothing
        }
        return sorted(merged.values(), key=lambda fn: (-getattr(fn, "reward_priority", 0), fn.__name__))


def _reward(name: str, value: Any, weight: float) -> Any:
    async def score() -> float:
        if value is None:
            raise ValueError("the SCOPE episode has not ended: it has no reward yet")
        return float(value)

    score.__name__ = name
    return vf.reward(score, weight=weight)


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
    """The agent seat's policy under evaluation or training (`--env.agent.*`). Its harness
    defaults to `ScopeChatHarness` (the one this plugin ships), which runs in process and needs
    no sandbox: the runtime is a local one (verifiers' default is a remote Prime sandbox)."""
    user: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The user seat's policy (`--env.user.*`), when `seats` names it."""
    seats: Literal["agent", "user", "both"] = "agent"
    """The seats verifiers' agents play; a SCOPE spec of the taskset plays the other one."""


class ScopeEnv(vf.Env[ScopeEnvConfig]):
    async def setup(self, agents: vf.Agents) -> None:
        played = SEATS[self.config.seats]
        for side in (AGENT, USER):
            getattr(agents, side).trainable = side in played

    async def run(self, task: ScopeTask, agents: vf.Agents) -> None:
        played = SEATS[self.config.seats]
        episode = await asyncio.to_thread(Episode, self.taskset.config, played)
        try:
            await self._play(task, {side: getattr(agents, side) for side in played}, episode)
        finally:
            episode.close()

    async def _play(self, task: ScopeTask, agents: dict[str, vf.Agent], episode: Episode) -> None:
        data = task.data
        options: dict[str, Any] = {"split": data.split}
        if data.task_id is not None:
            options["task_id"] = data.task_id
        await asyncio.to_thread(episode.reset, data.seed, options)
        dialogue = episode.dialogue
        seats = {side: Seat(episode, side) for side in agents}
        chats: dict[str, Any] = {}
        async with contextlib.AsyncExitStack() as stack:
            try:
                while dialogue.end is None:
                    seat = seats[dialogue.to_speak]
                    if seat.side in chats:
                        segment = await chats[seat.side].turn([_to_vf(m) for m in seat.news()])
                    else:
                        opened = self._open(agents[seat.side], self._seat_task(task, seat))
                        chats[seat.side] = await stack.enter_async_context(opened)
                        segment = await chats[seat.side].turn()
                    if segment.terminated:
                        break
                    await asyncio.to_thread(episode.act, seat.side, segment.last_reply)
            finally:
                # Before the interactions close: closing one scores its trace.
                if dialogue.end is None:
                    dialogue.abort("rollout_ended", "verifiers ended a seat's rollout before the conversation")
            for side, chat in chats.items():
                chat.trace.info["scope"] = {
                    "env": self.taskset.config.env,
                    "side": side,
                    "task_id": data.task_id,
                    "end": dialogue.end.reason,
                    "terminated": dialogue.end.terminated,
                    "turns": len(dialogue.log),
                }

    def _seat_task(self, task: ScopeTask, seat: Seat) -> ScopeTask:
        system, *heard = seat.dialogue.views[seat.side]
        seat.seen = 1 + len(heard)
        override = self.taskset.system_prompt
        first_played = SEATS[self.config.seats][0]
        seat_task = task.with_data(
            system_prompt=override if override is not None and seat.side == first_played else system.text,
            prompt=[_to_vf(m) for m in heard],  # possibly empty: the seat speaks first
        )
        seat_task.seat = seat
        return seat_task

    @contextlib.asynccontextmanager
    async def _open(self, agent: vf.Agent, task: ScopeTask) -> AsyncIterator[Any]:
        """The seat's interaction; a seat with tools gets them as a tool server too, for a harness
        that calls tools over MCP (`ScopeChatHarness` executes them itself unless told otherwise)."""
        harness = agent.harness
        direct = isinstance(harness, ScopeChatHarness) and harness.config.tools == "direct"
        if not task.seat.tools or not harness.SUPPORTS_MCP or direct:
            async with agent.interaction(task) as chat:
                yield chat
            return
        async with SeatToolset(task.seat.tools, task.seat.act).serve() as server:
            async with agent.interaction(task, tools={"": server}) as chat:
                yield chat


class ScopeChatHarnessConfig(vf.HarnessConfig):
    max_tool_calls: int = 64
    """Tool calls one segment may make before its reply is taken as it is."""
    tools: Literal["direct", "mcp"] = "direct"
    """`direct`: the harness has the episode execute each tool call itself; `mcp`: it calls the
    seat's tool server (`SeatToolset`), as any MCP-capable harness does."""


class ScopeChatHarness(vf.Harness[ScopeChatHarnessConfig]):
    """A chat loop in process: the model speaks through the interception endpoint; a tool call
    is the seat's action in the SCOPE episode, whose answer goes back to the model."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    SUPPORTS_MCP = True
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
        seat: Seat = trace.state.seat
        system, prompt = self.resolve_prompt(data)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        else:
            messages += [message_to_wire(m) for m in prompt or []]
        async with contextlib.AsyncExitStack() as stack:
            tools, call = await self._tools(seat, mcp_urls, stack)
            async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
                for _ in range(self.config.max_tool_calls + 1):
                    completion = await client.chat.completions.create(
                        model=ctx.model, messages=messages, tools=tools or None
                    )
                    reply = completion.choices[0].message
                    if not reply.tool_calls:
                        break
                    wire = reply.model_dump(exclude_none=True)
                    messages.append(wire)
                    messages += await call(Message.from_openai(wire))
                    if seat.dialogue.end is not None:
                        break
        return ProgramResult(exit_code=0, stdout="", stderr="")

    async def _tools(self, seat: Seat, mcp_urls: dict[str, str], stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        """The tool schemas to offer and how to answer an assistant message's tool calls."""
        if self.config.tools == "mcp" and seat.tools and not mcp_urls:
            raise RuntimeError("the harness calls tools over MCP, but the seat's tool server was not served")
        if self.config.tools == "direct" or not mcp_urls:

            async def direct(message: Message) -> list[dict[str, Any]]:
                return [m.to_openai() for m in await asyncio.to_thread(seat.act, message)]

            return seat.tools, direct
        from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp

        config = {"mcpServers": {name: {"url": url} for name, url in mcp_urls.items()}}
        schemas, dispatch, servers = await connect_mcp(config, stack)

        async def over_mcp(message: Message) -> list[dict[str, Any]]:
            answers = []
            for tool_call in message.tool_calls:
                if tool_call.name in dispatch:
                    content = await call_mcp(servers, dispatch, tool_call.name, tool_call.args)
                else:
                    content = f"Error: no tool named {tool_call.name!r}"
                answers.append({"role": "tool", "tool_call_id": tool_call.id, "content": content})
            return answers

        return schemas, over_mcp


def _to_vf(message: Message) -> vf.Message:
    from verifiers.v1.dialects import parse_message

    return parse_message(message.to_openai())
