"""`anthropic:MODEL`: the Anthropic messages API through the official `anthropic` client
(`client="sdk"`, the default: it tracks the API's version and authentication as they change), or
as plain JSON over one pooled HTTP client (`client="http"`, `sims.json_http`: API version
2023-06-01 with an `x-api-key` header), with the same retries, errors and key handling (`sims.api`).

The OpenAI-format view is converted: system messages become the `system` field, tool calls
`tool_use` blocks, tool results `tool_result` blocks in a user turn, consecutive turns of one role
are merged, and a view that opens with no user turn (this side speaks first) gets a short user
turn saying so, as the API requires one. The messages API has no `seed`; it is ignored.
"""

from __future__ import annotations

import json
import os
from typing import Any

from scope_envs.core.chat import ToolCall
from scope_envs.core.extras import MissingExtraError, needs_extra
from scope_envs.core.policy import Reply, SimulatorError, Usage
from sims.api import APISimulator
from sims.retry import RetryableError

OPENING_TURN = "(The conversation begins. You speak first.)"
API_VERSION = "2023-06-01"  # the `anthropic-version` of the lean client's requests


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """`(system, messages)` in Anthropic's format from OpenAI-format messages."""
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role, content = message["role"], message.get("content")
        text = (
            content
            if isinstance(content, str)
            else "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")
        )
        if role in {"system", "developer"}:
            system_parts.append(text)
        elif role == "user":
            add("user", [{"type": "text", "text": text}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in message.get("tool_calls") or []:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except json.JSONDecodeError:
                    arguments = {"raw": call["function"]["arguments"]}  # a malformed call, kept as sent
                blocks.append(
                    {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": arguments}
                )
            add("assistant", blocks or [{"type": "text", "text": ""}])
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": text}])
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": OPENING_TURN}]})
    return "\n\n".join(p for p in system_parts if p), turns


def to_anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}},
        }
        for t in tools
    ]


class AnthropicSimulator(APISimulator):
    """A Claude model behind the messages API; the key comes from `api_key` or `$ANTHROPIC_API_KEY`."""

    supports_structured_output = True
    default_client = "sdk"
    key_variable = "ANTHROPIC_API_KEY"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("max_tokens", 1024)  # required by the API
        super().__init__(model, **kwargs)
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        self._api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if self._api_key is None:
            raise SimulatorError("anthropic: no API key; set $ANTHROPIC_API_KEY or pass api_key=")

    def _make_client(self) -> Any:
        if self.client_kind == "http":
            from sims.json_http import JSONClient

            headers = {"x-api-key": self._api_key, "anthropic-version": API_VERSION}
            base_url = self.base_url or "https://api.anthropic.com"
            return JSONClient(base_url, headers, timeout=self.timeout, connections=self.concurrency)
        try:
            import anthropic
        except ImportError as error:
            raise MissingExtraError(needs_extra("the anthropic backend", "the 'anthropic' package", "api")) from error
        return anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0
        )

    def config(self) -> dict[str, Any]:
        return {**super().config(), "base_url": self.base_url}

    def _structured_options(self, schema: dict[str, Any], name: str) -> dict[str, Any]:
        return {"output_config": {"format": {"type": "json_schema", "schema": schema}}}

    async def _request(
        self,
        client: Any,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        seed: int | None,
        options: dict[str, Any],
    ) -> Reply:
        system, turns = to_anthropic(messages)
        request: dict[str, Any] = {"model": self.model, "messages": turns, "max_tokens": self.max_tokens}
        optional = {
            "system": system or None,
            "tools": to_anthropic_tools(tools) if tools else None,
            "temperature": self.temperature,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        request.update(options)
        if self.client_kind == "http":
            return self._reply(await client.post("v1/messages", {**request, **self.extra_body}))
        response = await client.messages.create(**request, extra_body=self.extra_body or None)
        return self._reply(response.model_dump())

    def _reply(self, response: dict[str, Any]) -> Reply:
        """The reply in a decoded message; a shape it cannot read raises (a malformed response)."""
        blocks = response.get("content")
        if blocks is None:
            raise RetryableError("the server returned no content")
        text = "".join(block["text"] for block in blocks if block["type"] == "text")
        calls = tuple(
            ToolCall(name=block["name"], arguments=json.dumps(block["input"]), id=block["id"])
            for block in blocks
            if block["type"] == "tool_use"
        )
        if not text and not calls:
            raise RetryableError("the server returned an empty message")
        usage = response.get("usage")
        return Reply(
            text=text,
            tool_calls=calls,
            usage=Usage(usage.get("input_tokens") or 0, usage.get("output_tokens") or 0) if usage else Usage(),
            metadata={
                "model": response.get("model"),
                "finish_reason": response.get("stop_reason"),
                "id": response.get("id"),
            },
        )

    def _classify(self, error: Exception) -> Exception:
        if self.client_kind == "http":
            return self._classify_http_error("anthropic", error)
        import anthropic

        return self._classify_client_error(anthropic, error)
