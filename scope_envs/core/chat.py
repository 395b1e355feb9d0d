"""Chat types: `Message` and `ToolCall`, lossless to and from OpenAI chat-format dicts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ToolCall:
    """One function call requested by a chat policy.

    `arguments` keeps the raw JSON text exactly as produced (OpenAI sends it as a string), so a
    round trip through OpenAI dicts never re-serialises it; `args` parses it on demand.
    """

    name: str
    arguments: str = "{}"
    id: str = ""
    type: str = "function"

    @classmethod
    def create(cls, name: str, args: Mapping[str, Any] | None = None, id: str = "") -> ToolCall:
        """Builds a call from a Python mapping of arguments."""
        return cls(name=name, arguments=json.dumps(dict(args or {}), ensure_ascii=False), id=id)

    @property
    def args(self) -> dict[str, Any]:
        """The arguments as a dict; raises `ValueError` when they are not a JSON object."""
        value = json.loads(self.arguments) if self.arguments.strip() else {}
        if not isinstance(value, dict):
            raise ValueError(f"tool call arguments must be a JSON object, got {type(value).__name__}")
        return value

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        function = data.get("function")
        if not isinstance(function, Mapping):
            raise ValueError("an OpenAI tool call needs a 'function' object with 'name' and 'arguments'")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("an OpenAI tool call needs a non-empty string 'function.name'")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = data.get("id") or ""
        if not isinstance(call_id, str):
            raise ValueError("an OpenAI tool call 'id' must be a string")
        return cls(name=name, arguments=arguments, id=call_id, type=str(data.get("type", "function")))


@dataclass(frozen=True)
class Message:
    """One chat message in OpenAI's format.

    `content` is a string, `None` (an assistant message that only calls tools), or a list of
    content parts (kept as given). Keys this class does not model (for example a server's
    `reasoning_content`) are kept in `extra` so that conversion back to a dict is exact.
    """

    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown chat role {self.role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(self.tool_calls, tuple):
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @property
    def text(self) -> str:
        """The text content: content parts of type text are joined; `None` is the empty string."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")

    @property
    def is_tool_call(self) -> bool:
        return bool(self.tool_calls)

    def to_openai(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role}
        data["content"] = [dict(p) for p in self.content] if isinstance(self.content, list) else self.content
        if self.tool_calls:
            data["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        for key, value in self.extra.items():
            data.setdefault(key, value)
        return data

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        if not isinstance(data, Mapping):
            raise ValueError(f"a chat message must be a mapping, got {type(data).__name__}")
        role = data.get("role")
        if not isinstance(role, str):
            raise ValueError("a chat message needs a string 'role'")
        content = data.get("content")
        if isinstance(content, list):
            content = [dict(part) for part in content]
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"message content must be a string, a list of parts or null, got {type(content).__name__}")
        raw_calls = data.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ValueError("'tool_calls' must be a list")
        known = {"role", "content", "tool_calls", "tool_call_id", "name"}
        return cls(
            role=role,
            content=content,
            tool_calls=tuple(ToolCall.from_openai(call) for call in raw_calls),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            extra={k: v for k, v in data.items() if k not in known},
        )


def as_message(message: Message | Mapping[str, Any]) -> Message:
    """Accepts a `Message` or an OpenAI dict."""
    return message if isinstance(message, Message) else Message.from_openai(message)


def to_openai_messages(messages: list[Message] | list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI dicts for a list of `Message` objects or dicts (dicts are copied)."""
    return [as_message(m).to_openai() for m in messages]


def function_tool(name: str, description: str, parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI tool schema for a function taking a JSON object of `parameters` (a JSON Schema)."""
    schema = dict(parameters) if parameters else {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


def tool_name(schema: Mapping[str, Any]) -> str:
    return str(schema["function"]["name"])
