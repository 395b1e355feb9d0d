"""`openai:MODEL`: chat completions over the official `openai` client, for OpenAI and any
OpenAI-compatible server (vLLM, SGLang, OpenRouter) through `base_url`."""

from __future__ import annotations

import json
import os
from typing import Any

from scope_envs.core.chat import ToolCall
from scope_envs.core.extras import MissingExtraError, needs_extra
from scope_envs.core.policy import Reply, SimulatorError, Usage
from sims.api import APISimulator
from sims.retry import RetryableError


class OpenAISimulator(APISimulator):
    """A chat model behind the OpenAI chat-completions API.

    `response_format` (e.g. `{"type": "json_schema", "json_schema": {...}}`) requests structured
    output; `seed` is passed per request. The key comes from `api_key` or `$OPENAI_API_KEY`
    (servers that need none get a placeholder).
    """

    supports_structured_output = True
    key_variable = "OPENAI_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        response_format: dict[str, Any] | None = None,
        top_p: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if self.base_url else None)
        if self._api_key is None:
            raise SimulatorError(
                "openai: no API key; set $OPENAI_API_KEY, pass api_key=, or give base_url= for a local server"
            )
        self.response_format = response_format
        self.top_p = top_p

    def _make_client(self) -> Any:
        try:
            import openai
        except ImportError as error:
            raise MissingExtraError(needs_extra("the openai backend", "the 'openai' package", "api")) from error
        return openai.AsyncOpenAI(api_key=self._api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "base_url": self.base_url}

    def _structured_options(self, schema: dict[str, Any], name: str) -> dict[str, Any]:
        return {
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        }

    async def _request(
        self,
        client: Any,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        seed: int | None,
        options: dict[str, Any],
    ) -> Reply:
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        optional = {
            "tools": tools or None,
            "seed": seed,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_completion_tokens": self.max_tokens,
            "response_format": self.response_format,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        request.update(options)
        request.update(self.extra_body or {})
        # The request is plain JSON already: posting it as the body skips the SDK's per-request
        # transformation of the params (about half of its client CPU per request), while keeping its
        # connection pool, error types and response model.
        from openai.types.chat import ChatCompletion

        response = await client.post("/chat/completions", body=request, cast_to=ChatCompletion)
        return self._reply(response)

    def _reply(self, response: Any) -> Reply:
        choices = getattr(response, "choices", None)
        if not choices:
            raise RetryableError("the server returned no choices")
        message = choices[0].message
        if message is None:
            raise RetryableError("the server returned a choice without a message")
        calls = tuple(
            ToolCall(name=call.function.name, arguments=_arguments(call.function.arguments), id=call.id or "")
            for call in (message.tool_calls or [])
            if getattr(call, "function", None) is not None
        )
        usage = getattr(response, "usage", None)
        return Reply(
            text=message.content or "",
            tool_calls=calls,
            usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else Usage(),
            metadata={
                "model": getattr(response, "model", self.model),
                "finish_reason": choices[0].finish_reason,
                "id": response.id,
            },
        )

    def _classify(self, error: Exception) -> Exception:
        import openai

        return self._classify_client_error(openai, error)


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw or {})
