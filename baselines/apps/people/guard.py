"""What stands in front of every route of the web app, as one ASGI middleware (`Guard`):

* the `Host` (and, when a browser sends one, the `Origin`) must name an address this server is
  meant to be reached at: loopback names by default, the public host with `--public`. A page
  elsewhere that rebinds its own name to 127.0.0.1 therefore reaches nothing;
* a request body is counted as it streams in and refused with 413 past `max_body` bytes, before
  anything parses it (a declared `Content-Length` over the cap is refused at once);
* every response carries a Content-Security-Policy (scripts and styles from this server only,
  no framing), `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff` and
  `Referrer-Policy: no-referrer` (page addresses carry tokens).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_BODY = 256 * 1024  # the largest valid request (a tool call's arguments) is well under it
SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


MAX_TOKEN = 200  # longer tokens are refused unread


def same_secret(given: str, expected: str) -> bool:
    """A constant-time comparison that refuses (never raises on) non-ASCII or overlong input."""
    if not given or len(given) > MAX_TOKEN:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


_PATH = re.compile(r"""(?<![^\s'"(=,])(?:[\w.+-]+:)?(?:[A-Za-z]:\\|~?/)[^\s'"),]*""")


def redact(text: str) -> str:
    """An error message fit for a browser: file system paths (and `scheme:/path` specs) removed."""
    return _PATH.sub("<path>", text)[:500]


class BodyTooLarge(HTTPException):
    """Raised inside the app when a streamed body passes the cap (an HTTP error, so that no body
    parser turns it into another one): 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request bodies are at most {limit} bytes")


def host_name(value: str) -> str:
    """The host of a `Host` header or an origin's netloc, lower case, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def origin_host(origin: str) -> str | None:
    """The host of an `Origin` header; None for `null` or anything that is not an http(s) origin."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return None
    return parts.hostname.lower()


class Guard:
    """See the module docstring. `hosts`: the names the server answers to."""

    def __init__(self, app: Any, *, hosts: Iterable[str], max_body: int = MAX_BODY) -> None:
        self.app = app
        self.hosts = frozenset(host_name(h) for h in hosts)
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if host_name(headers.get("host", "")) not in self.hosts:
            await _refuse(send, 421, "this server does not answer to that host name")
            return
        if "origin" in headers and origin_host(headers["origin"]) not in self.hosts:
            await _refuse(send, 403, "requests from other sites are refused")
            return
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            await _refuse(send, 413, f"request bodies are at most {self.max_body} bytes")
            return
        started = False
        received = 0

        async def counted_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise BodyTooLarge(self.max_body)
            return message

        async def secured_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in dict(SECURITY_HEADERS)]
                message = {**message, "headers": [*kept, *SECURITY_HEADERS]}
            await send(message)

        try:
            await self.app(scope, counted_receive, secured_send)
        except BodyTooLarge:
            if not started:
                await _refuse(send, 413, f"request bodies are at most {self.max_body} bytes")


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
