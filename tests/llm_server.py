"""A real HTTP server on loopback that speaks the OpenAI chat-completions and Anthropic messages
wire formats, for testing the API backends through their official clients.

Replies come from `responder(protocol, body) -> {"text": ..., "tool_calls": [(name, args), ...]}`
(by default: echo the last user text; "call NAME" asks for a tool call). Faults are queued with
`fail("429", "500", "timeout", "malformed", "empty", "400", "401", "403", "404", "context")`, one consumed
per request; `fail_always(fault)` answers every request with it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

Responder = Callable[[str, dict[str, Any]], dict[str, Any]]
# fault -> the HTTP status answered; "context" is a 400 about one conversation (too long for the model)
ERROR_STATUS = {"400": 400, "401": 401, "403": 403, "404": 404, "429": 429, "500": 500, "503": 503, "context": 400}
CONTEXT_TOO_LONG = "This model's maximum context length is 8192 tokens; your messages resulted in 9000 tokens."


def echo_responder(protocol: str, body: dict[str, Any]) -> dict[str, Any]:
    last = ""
    for message in body["messages"]:
        if message["role"] == "user":
            content = message["content"]
            texts = (
                [b.get("text", "") for b in content if b.get("type") == "text"]
                if isinstance(content, list)
                else [content]
            )
            last = texts[-1] if texts else last
    if last.startswith("call ") and body.get("tools"):
        return {"text": "", "tool_calls": [(last.split()[1], {"query": "x"})]}
    return {"text": f"echo: {last}"}


ServerT = TypeVar("ServerT", bound="LoopbackServer")


class LoopbackServer:
    """An HTTP server on loopback, serving from a thread of its own while entered. A POST's JSON
    body goes to `handle_post`, a GET to `handle_get` (by default unsupported, as a handler without
    `do_GET` answers); `send` and `send_json` answer."""

    def __init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.handle_get(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.handle_post(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self: ServerT) -> ServerT:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({handler.command!r})")

    def handle_post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        raise NotImplementedError

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            pass

    @classmethod
    def send_json(
        cls, handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        cls.send(handler, status, json.dumps(payload).encode(), headers)


class LLMServer(LoopbackServer):
    def __init__(self, responder: Responder = echo_responder, *, delay: float = 0.0) -> None:
        super().__init__()
        self.responder = responder
        self.delay = delay
        self.faults: list[str] = []
        self.always: str | None = None  # the fault of every request once `faults` is empty
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.timeout_sleep = 2.0
        self.retry_after = "0.05"
        self._lock = threading.Lock()

    def fail(self, *faults: str) -> None:
        with self._lock:
            self.faults.extend(faults)

    def fail_always(self, fault: str | None) -> None:
        with self._lock:
            self.always = fault

    def handle_post(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        protocol = "anthropic" if handler.path.rstrip("/").endswith("/messages") else "openai"
        with self._lock:
            self.requests.append({"path": handler.path, "headers": dict(handler.headers), "body": body})
            fault = self.faults.pop(0) if self.faults else self.always
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if fault == "timeout":
                time.sleep(self.timeout_sleep)
            if fault in ERROR_STATUS:
                headers = {"retry-after": self.retry_after} if fault == "429" else {}
                # Some servers echo the request's credentials in errors: the client must not pass them on.
                credential = handler.headers.get("authorization") or handler.headers.get("x-api-key") or ""
                reason = CONTEXT_TOO_LONG if fault == "context" else f"injected {fault}"
                error = {"error": {"message": f"{reason} for {credential}", "type": "error"}, "type": "error"}
                return self.send_json(handler, ERROR_STATUS[fault], error, headers)
            if fault == "malformed":
                return self.send(handler, 200, b'{"id": "x", "choices": [ {"message": ')
            reply = self.responder(protocol, body)
            payload = _anthropic(body, reply, fault) if protocol == "anthropic" else _openai(body, reply, fault)
            self.send_json(handler, 200, payload)
        finally:
            with self._lock:
                self.in_flight -= 1


def _openai(body: dict[str, Any], reply: dict[str, Any], fault: str | None) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(reply.get("tool_calls", []))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("text") or None}
    if calls:
        message["tool_calls"] = calls
    choices = (
        []
        if fault == "empty"
        else [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}]
    )
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "test"),
        "choices": choices,
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _anthropic(body: dict[str, Any], reply: dict[str, Any], fault: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.get("text"):
        content.append({"type": "text", "text": reply["text"]})
    for i, (name, args) in enumerate(reply.get("tool_calls", [])):
        content.append({"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args})
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "test"),
        "content": [] if fault == "empty" else content,
        "stop_reason": "tool_use" if reply.get("tool_calls") else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 13, "output_tokens": 5},
    }
