"""An episode's conversation as tau2 messages, the form tau2's evaluators read.

Tool calls the env never executed (an unknown tool, arguments that break the tool's schema, a
user-side call in these user-tool-less domains) are left out: they left no trace in the database,
and tau2 itself would have executed them, so they have no tau2 counterpart.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from scope_envs.core.chat import Message
from scope_envs.core.dialogue import AGENT, USER


def to_tau2_messages(log: Iterable[tuple[str, Message]], executed: Collection[str]) -> list[Any]:
    """tau2 `AssistantMessage` / `UserMessage` / `ToolMessage` objects for an env's `log`.

    `executed` holds the ids of the agent tool calls the env ran against the database.
    """
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    messages: list[Any] = []
    for side, message in log:
        if message.role == "tool":
            if side == AGENT and message.tool_call_id in executed:
                messages.append(
                    ToolMessage(
                        id=message.tool_call_id,
                        role="tool",
                        content=message.text,
                        requestor="assistant",
                        error=message.text.startswith("Error: "),
                    )
                )
            continue
        content = message.text if message.content is not None else None
        if side == AGENT:
            calls = [
                ToolCall(id=call.id, name=call.name, arguments=call.args, requestor="assistant")
                for call in message.tool_calls
                if call.id in executed
            ]
            if message.tool_calls and not calls and not (content and content.strip()):
                continue
            messages.append(AssistantMessage(role="assistant", content=content, tool_calls=calls or None))
        elif side == USER:
            if message.tool_calls and not (content and content.strip()):
                continue
            messages.append(UserMessage(role="user", content=content))
    return messages
