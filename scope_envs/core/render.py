"""Plain-text renderings of a conversation: a side's view (its observation) and the transcript."""

from __future__ import annotations

from collections.abc import Sequence

from scope_envs.core.chat import Message


def render_message(message: Message) -> str:
    lines = []
    if message.text or not message.tool_calls:
        lines.append(message.text)
    for call in message.tool_calls:
        lines.append(f"[tool call] {call.name}({call.arguments})")
    return "\n".join(lines)


def render_view(messages: Sequence[Message]) -> str:
    """One side's view as text: each message headed by its role, e.g. `[user]`."""
    return "\n\n".join(f"[{message.role}]\n{render_message(message)}" for message in messages)


def render_transcript(log: Sequence[tuple[str, Message]]) -> str:
    """The whole conversation as both sides see it, tool traffic included, one block a message."""
    blocks = []
    for side, message in log:
        label = f"{side} <- tool {message.name}" if message.role == "tool" else side
        blocks.append(f"{label}: {render_message(message)}")
    return "\n".join(blocks)
