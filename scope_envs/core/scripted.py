"""Rule-based policies: `ScriptedSimulator` (deterministic given a seed) and `FunctionSimulator`.

Every benchmark's scripted players subclass `ScriptedSimulator`; they live in the benchmark's own
folder and are named in its env's `scripted_policies`, which the spec `"scripted"` builds.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scope_envs.core.chat import Message
from scope_envs.core.policy import Reply, Simulator, Tools, View, as_messages


def view_digest(messages: Sequence[Message]) -> int:
    """A stable 63-bit digest of a view, so that an unseeded scripted reply is still reproducible."""
    payload = json.dumps([m.to_openai() for m in messages], sort_keys=True, ensure_ascii=False, default=str)
    return int.from_bytes(hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") >> 1


class ScriptedSimulator(Simulator):
    """Base of rule-based users and agents.

    Implement `reply(messages, tools, rng)`: it reads whatever it needs from the view (the system
    prompt carries the persona or task; the last `user` message is what the other side said) and
    returns text, a `Message` (e.g. with tool calls) or a `Reply`. `rng` is seeded from `seed`, or
    from the view itself when no seed is given, so replies are deterministic either way.
    """

    deterministic = True
    instant = True
    name = "scripted"

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        view = as_messages(messages)
        rng = np.random.default_rng(seed if seed is not None else view_digest(view))
        reply = Reply.coerce(self.reply(view, [dict(t) for t in tools or []], rng))
        reply.metadata.setdefault("simulator", self.name)
        return reply

    @abstractmethod
    def reply(
        self, messages: list[Message], tools: list[dict[str, Any]], rng: np.random.Generator
    ) -> str | Message | Reply:
        """The next turn of this side."""

    @staticmethod
    def system_prompt(messages: Sequence[Message]) -> str:
        return messages[0].text if messages and messages[0].role == "system" else ""

    @staticmethod
    def heard(messages: Sequence[Message]) -> list[str]:
        """What the other side has said so far (the `user` turns of this view), oldest first."""
        return [m.text for m in messages if m.role == "user"]

    @staticmethod
    def said(messages: Sequence[Message]) -> list[str]:
        """This side's own text turns so far."""
        return [m.text for m in messages if m.role == "assistant" and not m.tool_calls]


class FunctionSimulator(Simulator):
    """A plain function as a policy: `fn(messages, tools)` or `fn(messages, tools, seed)`.

    The function receives OpenAI message dicts and returns text, a `Message`, a dict or a `Reply`.
    """

    def __init__(self, fn: Callable[..., Any], *, deterministic: bool = False, name: str | None = None) -> None:
        self.fn = fn
        self.deterministic = deterministic
        self.name = name or getattr(fn, "__name__", "function")
        parameters = inspect.signature(fn).parameters
        self._takes_seed = "seed" in parameters or len(parameters) >= 3

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        view = [m.to_openai() for m in as_messages(messages)]
        tool_list = [dict(t) for t in tools or []]
        out = self.fn(view, tool_list, seed) if self._takes_seed else self.fn(view, tool_list)
        return Reply.coerce(out)
