"""`openai:MODEL`: chat completions for OpenAI and any OpenAI-compatible server (vLLM, SGLang,
OpenRouter) through `base_url`.

Two clients speak the same protocol with the same retries, errors and key handling (`sims.api`):
`client="http"` (the default), plain JSON over one pooled HTTP client (`sims.json_http`), and
`client="sdk"`, the official `openai` client, for what only it does (docs/simulators.md).
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


class OpenAISimulator(APISimulator):
    """A chat model behind the OpenAI chat-completions API.

    `client`: `"http"` (lean, the default) or `"sdk"` (the official client). `response_format`
    (e.g. `{"type": "json_schema", "json_schema": {...}}`) requests structured output; `seed` is
    passed per request. The key comes from `api_key` or `$OPENAI_API_KEY` (servers that need none
    get a placeholder); `$OPENAI_ORG_ID` and `$OPENAI_PROJECT_ID`, where set, are sent as the
    official client sends them.
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
        if self.client_kind == "http":
            from sims.json_http import JSONClient

            headers = {"authorization": f"Bearer {self._api_key}"}
            for header, variable in (("openai-organization", "OPENAI_ORG_ID"), ("openai-project", "OPENAI_PROJECT_ID")):
                if os.environ.get(variable):
                    headers[header] = os.environ[variable]
            base_url = self.base_url or "https://api.openai.com/v1"
            return JSONClient(base_url, headers, timeout=self.timeout, connections=self.concurrency)
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
        if self.client_kind == "http":
            return self._reply(await client.post("chat/completions", request))
        # The request is plain JSON already: posting it as the body skips the SDK's per-request
        # transformation of the params, while keeping its connection pool and error types.
        import httpx

        from sims.json_http import loads

        response = await client.post("/chat/completions", body=request, cast_to=httpx.Response)
        return self._reply(loads(response.content))

    def _reply(self, response: dict[str, Any]) -> Reply:
        """The reply in a decoded chat completion; a shape it cannot read raises (a malformed response)."""
        choices = response.get("choices")
        if not choices:
            raise RetryableError("the server returned no choices")
        message = choices[0].get("message")
        if message is None:
            raise RetryableError("the server returned a choice without a message")
        calls = tuple(
            ToolCall(
                name=call["function"]["name"],
                arguments=_arguments(call["function"].get("arguments")),
                id=call.get("id") or "",
            )
            for call in (message.get("tool_calls") or [])
            if call.get("function") is not None
        )
        usage = response.get("usage")
        return Reply(
            text=message.get("content") or "",
            tool_calls=calls,
            usage=Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0) if usage else Usage(),
            metadata={
                "model": response.get("model", self.model),
                "finish_reason": choices[0].get("finish_reason"),
                "id": response.get("id"),
            },
        )

    def _classify(self, error: Exception) -> Exception:
        if self.client_kind == "http":
            return self._classify_http_error("openai", error)
        import openai

        return self._classify_client_error(openai, error)


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw or {})
