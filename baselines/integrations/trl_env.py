"""SCOPE dialogue envs as TRL `GRPOTrainer` environments, from either seat: the model plays the
agent (a SCOPE simulator spec plays the user) or the user (a SCOPE agent spec plays the agent),
and the env scores the episode from the trained seat's side.

    from trl import GRPOConfig, GRPOTrainer
    from baselines.integrations.trl_env import environment_factory, reward_functions, task_dataset

    trainer = GRPOTrainer(  # ENV: a registered env name
        model=..., args=GRPOConfig(...), train_dataset=task_dataset(ENV, 64),
        environment_factory=environment_factory(ENV, "openai:gpt-5-mini"),
        reward_funcs=reward_functions(),
    )

TRL (tested: `trl>=1.16,<1.17`, its `environment_factory` API) makes one environment per rollout,
calls `reset(**row)` with each dataset row and appends what it returns to the row's last message,
offers the environment's public methods as tools, ends the rollout at the first reply without a
tool call, and then calls the reward functions with the completions and the environments. Here:

* `task_dataset` gives each row the seat's system prompt (SCOPE's, or `system_prompt=`) as a
  system message, and the scenario (`task_id`, `seed`) its rollout resets to;
* `reset` starts that episode and returns the conversation so far, each turn headed by its speaker;
* `say(message)` is a turn of the seat: the message goes to the other side, whose policy replies
  through the env (`AgentView` / `UserView`); the reply is the tool's result;
* each tool the env gives the seat (a customer-service domain's) is a tool of its own name and
  schema, executed by the env, its result the tool message;
* the rollout's last reply, written as plain text as chat models do, is the seat's last turn: the
  reward functions say it to the other side before scoring (`plain_text="ignore"` drops it);
  a conversation the rollout leaves unfinished is then ended as a truncation (`rollout_ended`)
  and scored by the env's own rules;
* `reward_functions(...)` are the seat's terminal reward and, to log or weight them, its reward
  components (`scope_<name>`), its success, and the curriculum reward of a co-trained user.
"""

from __future__ import annotations

import functools
import inspect
import json
import keyword
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from baselines.training.advantages import curriculum_reward
from scope_envs.core.chat import Message, ToolCall
from scope_envs.core.dialogue import AGENT, SIDES, USER, other_side
from scope_envs.core.rollout import success_of
from scope_envs.core.views import AgentView, UserView, build_env

ENDED = "[The conversation is over.]"
PLAIN_TEXT = ("turn", "ignore")
VIEWS = {AGENT: AgentView, USER: UserView}
SPEAKERS = {AGENT: "Agent", USER: "User"}


class ScopeChat:
    """One SCOPE episode as a TRL environment, played from `side`; see the module docstring."""

    def __init__(
        self,
        env: str,
        partner: Any = None,
        *,
        side: str = AGENT,
        split: str = "train",
        plain_text: str = "turn",
        system_prompt: str | None = None,
        **env_kwargs: Any,
    ) -> None:
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        if plain_text not in PLAIN_TEXT:
            raise ValueError(f"plain_text must be one of {PLAIN_TEXT}, got {plain_text!r}")
        self.side, self.split, self.plain_text, self.system_prompt = side, split, plain_text, system_prompt
        self.view = VIEWS[side](env, partner, **env_kwargs)
        self._seen = 0
        self._calls = 0

    @property
    def dialogue(self) -> Any:
        return self.view.dialogue

    def reset(self, **row: Any) -> str:
        options = {"split": row.get("split") or self.split}
        if row.get("task_id"):
            options["task_id"] = row["task_id"]
        seed = row.get("seed")
        self.view.reset(seed=None if seed is None else int(seed), options=options)
        self._seen, self._calls = len(self.dialogue.views[self.side]), 0
        prompted = any(m.get("role") == "system" for m in row.get("prompt") or [] if isinstance(m, Mapping))
        system = "" if prompted else (self.system_prompt or self.dialogue.views[self.side][0].text) + "\n\n"
        return "\n\n" + system + _opening(self.dialogue.views[self.side][1:], self.side)

    def say(self, message: str) -> str:
        """Say something to the person you are talking with, and hear their reply.

        Args:
            message: What you say to them.

        Returns:
            Their reply, or a note that the conversation is over.
        """
        return self._act(message)

    def _call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        self._calls += 1
        call = ToolCall.create(name, {k: v for k, v in arguments.items() if v is not None}, id=f"call_{self._calls}")
        return self._act(Message(role="assistant", tool_calls=(call,)))

    def _act(self, action: Any) -> str:
        if self.dialogue.end is not None:
            return ENDED
        self.view.step(action)
        reply = self._new_messages()
        return reply + ("\n" + ENDED if self.dialogue.end is not None else "")

    def _new_messages(self) -> str:
        """What the seat's view gained since it last looked, its own turns left out."""
        view = self.dialogue.views[self.side]
        start, self._seen = self._seen, len(view)
        return "\n".join(m.text for m in view[start:] if m.role != "assistant")

    def _finish(self, completion: Any) -> None:
        """Ends the episode when the rollout has: its plain-text last reply is the seat's last turn."""
        if self.dialogue.end is None and self.plain_text == "turn":
            text = _plain_reply(completion)
            if text:
                self._act(text)
        if self.dialogue.end is None:
            self.dialogue.abort("rollout_ended", "the trainer's rollout ended before the conversation")

    def _outcome(self, side: str | None = None) -> dict[str, Any]:
        return self.dialogue.chat_infos[side or self.side]["reward_info"]


def _plain_reply(completion: Any) -> str:
    """The text of a rollout's last message when it is a reply without a tool call."""
    if isinstance(completion, str):
        return completion.strip()
    last = completion[-1] if completion else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return ""
    content = last.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content.strip()


def _opening(messages: Sequence[Message], side: str) -> str:
    """The conversation so far, each turn headed by its speaker (the seat itself is `You`)."""
    if not messages:
        return "The conversation starts with you."
    other = SPEAKERS[other_side(side)]
    lines = ["The conversation so far:"]
    for message in messages:
        speaker = "You" if message.role == "assistant" else f"Tool {message.name}" if message.role == "tool" else other
        lines.append(f"{speaker}: {message.text}")
    return "\n".join(lines)


# ---- the env's tools as tools of their own names ---------------------------------------------

JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _python_type(schema: Mapping[str, Any]) -> Any:
    """The type hint transformers' `get_json_schema` turns back into `schema` (its basic types)."""
    if "$ref" in schema:
        return dict
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if schema.get("type") == "array":
        return list[_python_type(schema.get("items", {}))] if schema.get("items") else list
    if "anyOf" in schema:
        return functools.reduce(operator.or_, [_python_type(s) for s in schema["anyOf"]])
    if schema.get("type") == "null":
        return type(None)
    return JSON_TYPES.get(schema.get("type", "string"), str)


def _refs(schema: Any) -> list[str]:
    """The `$ref`s anywhere in a JSON schema, in order."""
    if isinstance(schema, Mapping):
        own = [schema["$ref"]] if isinstance(schema.get("$ref"), str) else []
        return own + [ref for value in schema.values() for ref in _refs(value)]
    if isinstance(schema, list):
        return [ref for value in schema for ref in _refs(value)]
    return []


def _tool_method(tool: Mapping[str, Any]) -> Callable[..., str]:
    """A method named and typed as the env's tool, for TRL to offer and call."""
    function = tool["function"]
    name = function["name"]
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    for identifier in (name, *properties):
        if not identifier.isidentifier() or keyword.iskeyword(identifier):
            raise ValueError(f"the env's tool {name!r} cannot be a TRL tool: {identifier!r} is not a Python name")

    def call(self: ScopeChat, **arguments: Any) -> str:
        return self._call_tool(name, arguments)

    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    described = []
    for arg, schema in properties.items():
        annotations[arg] = _python_type(schema)
        default = inspect.Parameter.empty if arg in required else None
        signature.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default))
        detail = schema.get("description") or schema.get("title") or arg
        if schema.get("type") == "object" and schema.get("properties"):
            detail += f" (a JSON object: {json.dumps(schema['properties'], ensure_ascii=False)})"
        for ref in _refs(schema):  # pydantic's nested models: the fields their type hint cannot carry
            fields = parameters.get("$defs", {}).get(ref.rpartition("/")[2], {}).get("properties", {})
            detail += f" ({ref.rpartition('/')[2]}: a JSON object: {json.dumps(fields, ensure_ascii=False)})"
        described.append(f"    {arg}: {' '.join(detail.split())}")
    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [p.replace(annotation=annotations.get(p.name, p.annotation)) for p in signature], return_annotation=str
    )
    call.__annotations__ = {**annotations, "return": str}
    args_block = "\n\nArgs:\n" + "\n".join(described) if described else ""
    description = " ".join((function.get("description") or name).split())
    call.__doc__ = f"{description}{args_block}\n\nReturns:\n    The tool's result, or its error."
    return call


def _with_tools(tools: Sequence[Mapping[str, Any]]) -> type[ScopeChat]:
    """A `ScopeChat` subclass with one method per tool of the env's seat."""
    taken = {name for name, _ in inspect.getmembers(ScopeChat, predicate=inspect.isfunction)}
    methods = {}
    for tool in tools:
        name = tool["function"]["name"]
        if name in taken:
            raise ValueError(f"the env's tool {name!r} has the name of a ScopeChat method")
        methods[name] = _tool_method(tool)
    return type("ScopeChatWithTools", (ScopeChat,), {"__module__": __name__, **methods})


def environment_factory(env: str, partner: Any = None, *, side: str = AGENT, **kwargs: Any) -> Callable[[], ScopeChat]:
    """What `GRPOTrainer(environment_factory=...)` takes: a new `ScopeChat` on `env` (a registered
    name) playing `side`, `partner` (a SCOPE spec) the other side, with the seat's tools as methods
    where the env gives it tools. `kwargs`: `split`, `plain_text`, `system_prompt`, env kwargs."""
    probe = ScopeChat(env, partner, side=side, **kwargs)
    probe.reset(seed=0)
    tools = probe.dialogue.chat_infos[side]["tools"]
    probe.dialogue.close()
    cls = _with_tools(tools) if tools else ScopeChat
    return lambda: cls(env, partner, side=side, **kwargs)


# ---- reward functions ---------------------------------------------------------------------------


def _finished(completions: Sequence[Any], environments: Sequence[ScopeChat]) -> Sequence[ScopeChat]:
    for completion, chat in zip(completions, environments, strict=True):
        chat._finish(completion)
    return environments


def scope_reward(completions: Sequence[Any], environments: Sequence[ScopeChat], **_: Any) -> list[float]:
    """The seat's terminal reward from the env (the user's: adversarial 1 - r or cooperative r)."""
    return [float(chat._outcome()["reward"]) for chat in _finished(completions, environments)]


def scope_success(completions: Sequence[Any], environments: Sequence[ScopeChat], **_: Any) -> list[float]:
    """The seat's own success (the env's success component, else a full reward)."""
    chats = _finished(completions, environments)
    return [float(success_of(c._outcome()["reward"], c._outcome().get("components", {}))) for c in chats]


def component_reward(name: str) -> Callable[..., list[float | None]]:
    """The seat's reward component `name` (None, which TRL skips, where an episode has none)."""

    def component(completions: Sequence[Any], environments: Sequence[ScopeChat], **_: Any) -> list[float | None]:
        values = [chat._outcome().get("components", {}).get(name) for chat in _finished(completions, environments)]
        return [None if value is None else float(value) for value in values]

    component.__name__ = component.__qualname__ = f"scope_{name}"
    return component


def scope_curriculum(
    completions: Sequence[Any],
    environments: Sequence[ScopeChat],
    *,
    task_id: Sequence[Any],
    seed: Sequence[Any],
    **_: Any,
) -> list[float]:
    """The curriculum reward of a trained user (`baselines.training.advantages.curriculum_reward`):
    one number per group of rollouts of the same row, from the variance of the agent's rewards."""
    chats = _finished(completions, environments)
    groups: dict[tuple[Any, Any], list[int]] = {}
    for index, key in enumerate(zip(task_id, seed, strict=True)):
        groups.setdefault(key, []).append(index)
    rewards = [0.0] * len(chats)
    for members in groups.values():
        value = curriculum_reward(np.array([chats[i]._outcome(AGENT)["reward"] for i in members]))
        for i in members:
            rewards[i] = value
    return rewards


def reward_functions(*components: str, success: bool = False, curriculum: bool = False) -> list[Callable[..., Any]]:
    """`GRPOTrainer(reward_funcs=...)`: the seat's reward, then each named component (`donation`,
    a tool domain's `DB`, `ACTION`, `COMMUNICATE`, ...), its success, and the curriculum reward. TRL weighs
    them by `GRPOConfig(reward_weights=[...])` (all 1 by default); weight 0 logs one unweighted."""
    functions: list[Callable[..., Any]] = [scope_reward, *(component_reward(name) for name in components)]
    return functions + [scope_success] * success + [scope_curriculum] * curriculum


def task_dataset(
    env: str,
    size: int,
    *,
    side: str = AGENT,
    split: str = "train",
    system_prompt: str | None = None,
    instruction: str | None = None,
    **env_kwargs: Any,
) -> Any:
    """A `datasets.Dataset` of `size` rows for `GRPOTrainer`: the seat's system prompt (SCOPE's for
    the row's scenario, or `system_prompt`), an instruction, and the scenario (`task_id`, cycling
    over the env's tasks of `split`; `seed`) each rollout resets to."""
    from datasets import Dataset

    dialogue = build_env(env, **env_kwargs)
    ids = dialogue.task_ids(split) if hasattr(dialogue, "task_ids") else []
    other = SPEAKERS[other_side(side)].lower()
    text = instruction or (
        f"You are the {SPEAKERS[side].lower()} in this conversation. Speak to the {other} with the say tool to "
        f"hear their reply; a reply without a tool call is your last word."
    )
    rows = []
    for i in range(size):
        task_id = ids[i % len(ids)] if ids else None
        options = {"split": split} if task_id is None else {"task_id": task_id}
        system = system_prompt or dialogue.pick_scenario(i, options).system_prompts[side]
        rows.append(
            {
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": text}],
                "task_id": task_id or "",
                "split": split,
                "seed": i,
            }
        )
    dialogue.close()
    return Dataset.from_list(rows)
