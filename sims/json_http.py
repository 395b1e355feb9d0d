"""`JSONClient`: JSON over HTTP for the API backends, as lean as the request path allows.

One pooled `aiohttp` session per simulator (built on its background loop, with aiohttp's C HTTP
parser), request bodies that are plain JSON already (no per-request model objects), and orjson
where it is installed. It costs a fraction of an official SDK's client CPU per request
(docs/scaling.md), which is what bounds an API-bound rollout on few cores. (httpx, under the
SDKs, scans its whole connection pool on every request: at 64 connections that alone costs
several milliseconds a request.) It retries nothing: `sims.api` owns retries, what errors mean
and key scrubbing, the same for this client and the SDKs. A proxy comes from the environment
(`$HTTPS_PROXY`, `$NO_PROXY`, ...) as with the SDKs, read once rather than at every request.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import aiohttp

try:
    import orjson

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

    loads = orjson.loads
except ImportError:  # orjson comes with the `api` extra; the standard library does the same, slower
    import json

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    loads = json.loads


class HTTPStatusError(Exception):
    """A reply with an error status. Its message holds the server's body (which `sims.api`
    redacts); `headers` are the reply's (`retry-after`), never the request's."""

    def __init__(self, status_code: int, headers: Mapping[str, str], body: bytes) -> None:
        super().__init__(f"Error code: {status_code} - {body[:2000].decode(errors='replace')}")
        self.status_code = status_code
        self.headers = headers


class JSONClient:
    """POSTs JSON to `base_url` + path with fixed `headers`, at most `connections` at a time; each
    of connecting and reading a reply may take up to `timeout` seconds (as the SDKs' timeout)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], *, timeout: float, connections: int) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self._headers = {"content-type": "application/json", "accept": "application/json", **headers}
        self._timeout = timeout
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None  # made on the loop of the first request
        self._proxy = environment_proxy(self.base_url)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self._connections),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout, sock_read=self._timeout),
            )
        return self._session

    async def post(self, path: str, body: Any) -> Any:
        """The decoded JSON reply; `HTTPStatusError` for an error status, `ValueError` for a body
        that is not JSON, aiohttp's own errors (`aiohttp.ClientError`, `TimeoutError`) for
        timeouts and connection failures."""
        async with self._open().post(self.base_url + path.lstrip("/"), data=dumps(body), proxy=self._proxy) as response:
            content = await response.read()
            if response.status >= 400:
                raise HTTPStatusError(response.status, response.headers, content)
        return loads(content)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (`$HTTPS_PROXY` / `$HTTP_PROXY`, unless `$NO_PROXY`
    exempts its host), as httpx and requests read it."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.hostname and urllib.request.proxy_bypass_environment(parsed.hostname):
        return None
    return urllib.request.getproxies_environment().get(parsed.scheme)
