"""The chat-policy contract every layer shares: a stateless policy maps a view to a `Reply`.

A policy plays either side of a conversation: a user simulator, or an agent. It holds no
conversation state (the env owns the conversation). Environments and their scripted players
depend on this contract, simulator backends implement it, trainers wrap it.

`Simulator` is the base class: implement `respond` or `arespond` (or both); the other and the
batched forms are derived:

* `respond` from `arespond` runs the coroutine to completion;
* `arespond` from `respond` runs it in a worker thread;
* `respond_batch` gathers `arespond` concurrently when the subclass has a native async form
  (API clients), and otherwise answers one view after the other (local models override it with
  real batched generation).

Anything with a `respond(messages, tools=None, *, seed=None)` method is a policy (`ChatPolicy`);
the base class only saves writing the other forms.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from scope_envs.core.chat import Message, ToolCall, as_message

View = Sequence[Mapping[str, Any] | Message]
Tools = Sequence[Mapping[str, Any]] | None


class PolicyError(RuntimeError):
    """A policy could not produce a usable reply (after its own retries).

    Views, batches and rollouts turn it into a truncation of that episode
    (`end_reason == "policy_error"`) instead of letting it end the whole run.
    """

    end_reason = "policy_error"  # the truncation it ends an episode with


class ContextFull(PolicyError):
    """A model whose context (its `max_model_len` tokens) has no room left for another turn: the
    episode ends as a truncation named `max_model_len`, not as a failure of the policy."""

    end_reason = "max_model_len"


class SimulatorError(PolicyError):
    """A simulator backend could not produce a usable reply; a `PolicyError` like any other."""


class FatalPolicyError(RuntimeError):
    """A failure that no retry and no other episode can avoid: a rejected API key, an unknown
    model, a request the API refuses whatever the conversation.

    Deliberately not a `PolicyError`: views, batches and rollouts let it propagate, so it ends the
    whole run at once with its message instead of truncating every episode as `policy_error`.
    """


@runtime_checkable
class ChatPolicy(Protocol):
    """Anything that answers a view: `respond(messages, tools=None, *, seed=None)`.

    It returns text, a `Message`, an OpenAI message dict, or a `Reply`.
    """

    def respond(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        seed: int | None = None,
    ) -> Any: ...


@dataclass
class Usage:
    """Token usage and cost of one or more replies."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost_usd + other.cost_usd,
        )


@dataclass
class Reply:
    """What a policy said: text and/or tool calls, and, for trainable local models, the
    generated token ids with their sampling log-probabilities."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: Usage | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_message(self) -> Message:
        content = self.text if (self.text or not self.tool_calls) else None
        return Message("assistant", content, tool_calls=tuple(self.tool_calls))

    @classmethod
    def coerce(cls, value: Any) -> Reply:
        """A `Reply` from a `Reply`, text, a `Message` or an OpenAI message dict."""
        if isinstance(value, Reply):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, (Message, Mapping)):
            message = as_message(value)
            return cls(text=message.text, tool_calls=message.tool_calls)
        raise TypeError(f"a policy must reply with text, a Message or a Reply, got {type(value).__name__}")


def batch_arguments(
    batch: Sequence[Any], tools: Sequence[Tools] | None, seeds: Sequence[int | None] | None
) -> tuple[list[Tools], list[int | None]]:
    """Per-view tools and seeds (None means none for every view), checked to match the batch."""
    tool_list = list(tools) if tools is not None else [None] * len(batch)
    seed_list = list(seeds) if seeds is not None else [None] * len(batch)
    if not (len(tool_list) == len(seed_list) == len(batch)):
        raise ValueError("batch, tools and seeds must have the same length")
    return tool_list, seed_list


def as_messages(messages: View) -> list[Message]:
    return [as_message(m) for m in messages]


def run_sync(coroutine: Any) -> Any:
    """Runs a coroutine to completion from synchronous code, even inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=target, name="scope-run-sync")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def run_beside(policies: Iterable[Any], make: Callable[[], Any]) -> Any:
    """Runs the coroutine `make()` to completion from synchronous code: on the event loop of the
    first of `policies` that has one of its own (`run_on_loop(make)`: the API backends, whose
    requests are then awaited where they are made), else as `run_sync` does. From a thread whose
    own loop is running (where such a wait would block that loop), always as `run_sync` does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        for policy in policies:
            run_on_loop = getattr(policy, "run_on_loop", None)
            if run_on_loop is not None:
                return run_on_loop(make)
    return run_sync(make())


class Simulator:
    """Base class of chat policies; see the module docstring."""

    #: True when the same view, tools and seed always give the same reply.
    deterministic: bool = False
    #: True when `respond` takes microseconds and never waits (rule-based players): per-episode
    #: rollouts then call it on their event loop instead of handing it to a worker thread.
    instant: bool = False
    name: str = "simulator"

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        if type(self).arespond is Simulator.arespond:
            raise NotImplementedError(f"{type(self).__name__} must implement respond() or arespond()")
        return run_sync(self.arespond(messages, tools, seed=seed))

    async def arespond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        if type(self).respond is Simulator.respond:
            raise NotImplementedError(f"{type(self).__name__} must implement respond() or arespond()")
        return await asyncio.to_thread(self.respond, messages, tools, seed=seed)

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        """One reply per view; `tools` and `seeds` are per view (or None for all)."""
        tool_list, seed_list = batch_arguments(batch, tools, seeds)
        if type(self).arespond is not Simulator.arespond:
            return run_sync(self.arespond_batch(batch, tool_list, seeds=seed_list))
        return [self.respond(m, t, seed=s) for m, t, s in zip(batch, tool_list, seed_list, strict=True)]

    async def arespond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        tool_list, seed_list = batch_arguments(batch, tools, seeds)
        return list(
            await asyncio.gather(
                *(self.arespond(m, t, seed=s) for m, t, s in zip(batch, tool_list, seed_list, strict=True))
            )
        )

    def close(self) -> None:
        """Releases clients or models; the default holds nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def is_deterministic(policy: Any) -> bool:
    """True when the policy declares that the same view and seed always give the same reply."""
    return bool(getattr(policy, "deterministic", False))


def reply_or_error(policy: Any, messages: Any, tools: Any, seed: int | None) -> Any:
    """The policy's reply to one view, or the `PolicyError` it raised (an episode's failure,
    not the caller's)."""
    try:
        return policy.respond(messages, tools or None, seed=seed)
    except PolicyError as error:
        return error


def has_native_async(policy: Any) -> bool:
    """True when `policy.arespond` is its own coroutine (an API client), not `Simulator`'s
    default of running `respond` in a thread."""
    arespond = getattr(type(policy), "arespond", None)
    return inspect.iscoroutinefunction(arespond) and arespond is not Simulator.arespond


def any_native_async(policies: Iterable[Any]) -> bool:
    """True when any of `policies` answers asynchronously: the rule by which episodes are played
    per episode (`scope_envs.core.async_rollout`) rather than in lockstep when the caller lets it choose."""
    return any(has_native_async(policy) for policy in policies)
