"""Shared machinery of the HTTP API backends: one event loop per simulator, a concurrency limit,
retries, and token/cost accounting.

Every call, synchronous or not, runs on the simulator's own background event loop, so one async
client (and its connection pool) and one concurrency semaphore serve all callers, from any thread
or event loop. API keys come from arguments or the environment, are handed to the client only,
and never appear in `repr`, errors (nor the exceptions chained to them) or `config()`. A rejected
key, an unknown model or a request the API refuses whatever the conversation raise
`FatalPolicyError`, which ends the run instead of failing every episode one after the other.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from scope_envs.core.errors import UsageError
from scope_envs.core.policy import (
    FatalPolicyError,
    Reply,
    Simulator,
    SimulatorError,
    Tools,
    Usage,
    View,
    as_messages,
    batch_arguments,
)
from sims.background_loop import BackgroundLoop
from sims.retry import (
    AUTHENTICATION_STATUS,
    CONFIGURATION_STATUS,
    RETRYABLE_STATUS,
    RetryableError,
    RetryPolicy,
    about_one_conversation,
    retry_after_seconds,
)

# "http": JSON over one pooled aiohttp session (`sims.json_http`); "sdk": the provider's official client
CLIENTS = ("http", "sdk")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_million + completion_tokens * self.output_per_million) / 1e6


class APISimulator(Simulator):
    """Base of the API backends. Subclasses build the client (`client`: one of `CLIENTS`) and
    implement `_request`."""

    def __init__(
        self,
        model: str,
        *,
        timeout: float = 60.0,
        concurrency: int = 16,
        retry: RetryPolicy | None = None,
        price: Price | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
        client: str | None = None,
    ) -> None:
        client = client or self.default_client
        if client not in CLIENTS:
            raise ValueError(f"client must be one of {CLIENTS}, got {client!r}")
        if not model:
            raise UsageError("an API simulator needs a model name, e.g. 'openai:gpt-5-mini'")
        self.model = model
        self.name = model
        self.timeout = timeout
        self.concurrency = concurrency
        self.retry = retry or RetryPolicy()
        self.price = price or Price()
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self.client_kind = client
        self.usage = Usage()
        self.calls = 0
        self.retries = 0
        self._lock = threading.Lock()  # the counters, updated from the loop and read from anywhere
        self._background = BackgroundLoop(type(self).__name__, setup=self._on_loop)
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self._jitter = random.Random()

    # ---- what a backend provides -----------------------------------------------------------------

    @abstractmethod
    def _make_client(self) -> Any:
        """The async client, built on the simulator's loop."""

    @abstractmethod
    async def _request(
        self,
        client: Any,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        seed: int | None,
        options: dict[str, Any],
    ) -> Reply:
        """One attempt; `options` are per-call request fields (structured output). Raise `RetryableError`
        for what may succeed on retry, `SimulatorError` for what will not, `FatalPolicyError` for
        what no request of this simulator will get past."""

    supports_structured_output: bool = False
    default_client: str = "http"  # of `CLIENTS`
    key_variable: str = "API_KEY"  # the environment variable the key comes from, named in errors

    def _structured_options(self, schema: dict[str, Any], name: str) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} has no structured output")

    @abstractmethod
    def _classify(self, error: Exception) -> Exception:
        """Maps a client exception to `RetryableError`, `SimulatorError` or `FatalPolicyError` (without secrets)."""

    # ---- the Simulator contract --------------------------------------------------------------------

    def respond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return self._submit(lambda: self._respond(messages, tools, seed)).result()

    async def arespond(self, messages: View, tools: Tools = None, *, seed: int | None = None) -> Reply:
        return await self._background.wait(lambda: self._respond(messages, tools, seed))

    def respond_batch(
        self, batch: Sequence[View], tools: Sequence[Tools] | None = None, *, seeds: Sequence[int | None] | None = None
    ) -> list[Reply]:
        tool_list, seed_list = batch_arguments(batch, tools, seeds)
        futures = [
            self._submit(lambda m=m, t=t, s=s: self._respond(m, t, s)) for m, t, s in zip(batch, tool_list, seed_list)
        ]
        return [future.result() for future in futures]

    def respond_json(
        self, messages: View, schema: dict[str, Any], *, seed: int | None = None, name: str = "response"
    ) -> Reply:
        """A reply whose text is JSON following `schema`, through the API's structured output."""
        return self.respond_json_batch([messages], schema, seeds=[seed], name=name)[0]

    def respond_json_batch(
        self,
        batch: Sequence[View],
        schema: dict[str, Any],
        *,
        seeds: Sequence[int | None] | None = None,
        name: str = "response",
    ) -> list[Reply]:
        """`respond_json` for each view, the requests in flight together."""
        options = self._structured_options(schema, name)
        _, seed_list = batch_arguments(batch, None, seeds)
        futures = [self._submit(lambda m=m, s=s: self._respond(m, None, s, options)) for m, s in zip(batch, seed_list)]
        return [future.result() for future in futures]

    def run_on_loop(self, make: Callable[[], Awaitable[Any]]) -> Any:
        """Runs the coroutine `make()` to completion on this simulator's own event loop, from
        synchronous code. A rollout run there awaits this simulator's requests without handing
        each one to another thread and back (`scope_envs.core.policy.run_beside`)."""
        return self._background.run(make)

    def close(self) -> None:
        client, self._client = self._client, None
        self._background.close(client.close if client is not None and hasattr(client, "close") else None)

    def config(self) -> dict[str, Any]:
        """What reproduces this simulator, keys excluded (safe to write into run configs)."""
        return {
            "backend": type(self).__name__,
            "model": self.model,
            "timeout": self.timeout,
            "concurrency": self.concurrency,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "client": self.client_kind,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    # ---- internals -----------------------------------------------------------------------------------

    def _submit(self, make: Callable[[], Awaitable[Reply]]) -> Future[Reply]:
        return self._background.submit(make)

    def _on_loop(self) -> None:
        """The loop-bound parts, built on the simulator's background loop when it starts."""
        self._semaphore = asyncio.Semaphore(self.concurrency)
        self._client = self._make_client()

    async def _respond(
        self, messages: View, tools: Tools, seed: int | None, options: dict[str, Any] | None = None
    ) -> Reply:
        view = [m.to_openai() for m in as_messages(messages)]
        tool_list = [dict(t) for t in tools] if tools else None
        assert self._semaphore is not None
        last_error = "no attempt was made"
        for attempt in range(self.retry.max_attempts):
            async with self._semaphore:
                outcome = await self._attempt(view, tool_list, seed, options or {})
            if isinstance(outcome, Reply):
                self._account(outcome)
                outcome.metadata["attempts"] = attempt + 1
                return outcome
            if not isinstance(outcome, RetryableError):
                raise outcome  # outside any `except`, so no client exception is chained to it
            last_error = str(outcome)
            if attempt + 1 < self.retry.max_attempts:
                with self._lock:
                    self.retries += 1
                await asyncio.sleep(self.retry.delay(attempt, getattr(outcome, "retry_after", None), self._jitter))
        raise SimulatorError(f"{self!r} failed after {self.retry.max_attempts} attempts; last error: {last_error}")

    async def _attempt(
        self, view: list[dict[str, Any]], tools: list[dict[str, Any]] | None, seed: int | None, options: dict[str, Any]
    ) -> Reply | Exception:
        """One request: its reply, or the error it ended in, classified and detached from the client's
        exception (whose request, headers and key included, would otherwise ride along as `__context__`)."""
        try:
            return await self._request(self._client, view, tools, seed, options)
        except (RetryableError, SimulatorError, FatalPolicyError) as error:
            return detached(error)
        except Exception as error:  # the client's own exceptions
            return detached(self._classify(error))

    def _classify_client_error(self, sdk: Any, error: Exception) -> Exception:
        """`RetryableError`, `SimulatorError` or `FatalPolicyError` for an exception of the `openai` /
        `anthropic` SDK, whose exception classes share their names."""
        backend = sdk.__name__
        if isinstance(error, (sdk.APITimeoutError, sdk.APIConnectionError)):
            return RetryableError(f"{type(error).__name__}: the request timed out or could not connect")
        if isinstance(error, sdk.APIStatusError):
            return self._status_error(backend, error.status_code, error, error.response.headers)
        malformed = (sdk.APIResponseValidationError, json.JSONDecodeError, ValueError, TypeError, AttributeError)
        if isinstance(error, malformed):
            return RetryableError(f"malformed response ({type(error).__name__})")
        return SimulatorError(f"{backend}: unexpected {type(error).__name__}: {self._redact(str(error))}")

    def _classify_http_error(self, backend: str, error: Exception) -> Exception:
        """The same for an exception of the lean client (`sims.json_http`) and aiohttp beneath it."""
        import aiohttp

        from sims.json_http import HTTPStatusError

        if isinstance(error, HTTPStatusError):
            return self._status_error(backend, error.status_code, error, error.headers)
        if isinstance(error, (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError)):
            return RetryableError(f"{type(error).__name__}: the request timed out or could not connect")
        if isinstance(error, (ValueError, TypeError, KeyError, AttributeError)):  # not JSON, or not the expected shape
            return RetryableError(f"malformed response ({type(error).__name__})")
        return SimulatorError(f"{backend}: unexpected {type(error).__name__}: {self._redact(str(error))}")

    def _status_error(self, backend: str, status: int, error: Any, headers: Any) -> Exception:
        """An HTTP error status as what it means for the run: worth a retry, fatal (the key or the
        configuration is wrong, so every request will fail), or the failure of this one request."""
        detail = self._redact(str(error))
        if status in RETRYABLE_STATUS or status >= 500:
            return RetryableError(f"HTTP {status} from the server", retry_after_seconds(headers))
        if status in AUTHENTICATION_STATUS:
            return FatalPolicyError(
                f"{backend}: HTTP {status}: the API key was rejected, may not use model {self.model!r}, or has "
                f"no credit; check ${self.key_variable} or api_key=. Server said: {detail}"
            )
        if status in CONFIGURATION_STATUS and not about_one_conversation(detail):
            return FatalPolicyError(
                f"{backend}: HTTP {status}: the API refuses the requests of this simulator (unknown model "
                f"{self.model!r}, wrong base_url, or an option the model does not take); fix its configuration. "
                f"Server said: {detail}"
            )
        return SimulatorError(f"{backend}: HTTP {status} from the server (not retried): {detail}")

    def _redact(self, text: str) -> str:
        """`text` without the API key or anything that looks like one."""
        key = getattr(self, "_api_key", None)
        if key and len(key) >= 4:
            text = text.replace(key, "<redacted>")
        text = re.sub(r"(Bearer\s+)[^\s'\"]+", r"\1<redacted>", text)
        return re.sub(r"(sk-|key[-_]?)[A-Za-z0-9_\-]{6,}", "<redacted>", text)[:500]

    def _account(self, reply: Reply) -> None:
        if reply.usage is not None:
            reply.usage.cost_usd = self.price.cost(reply.usage.prompt_tokens, reply.usage.completion_tokens)
        with self._lock:
            self.calls += 1
            if reply.usage is not None:
                self.usage = self.usage + reply.usage


def detached(error: Exception) -> Exception:
    """`error` without the exceptions it was raised during (and their tracebacks): a client
    exception there holds the request, whose headers hold the API key."""
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = False
    return error.with_traceback(None)
