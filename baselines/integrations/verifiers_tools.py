"""A seat's tools of a live SCOPE episode as a verifiers tool server (MCP), for any harness.

verifiers launches a `vf.Toolset` as its own process (`python -m module`, per rollout or once per
run) that sees the rollout only through a serialised `State`, and registers its tools from the
signatures of `@vf.tool` methods. A SCOPE tool acts on the live episode (a tool domain's database
inside the env's process), and its schema is the env's, known only once the episode is reset; so
`SeatToolset` serves the seat's tools in the env's own process, on loopback, over the transport a
`vf.Toolset` serves (MCP streamable HTTP, stateless, JSON responses), and the env hands it to the
seat's rollout as a live tool server (`Agent.interaction(task, tools=...)`): every harness that
supports MCP gets it among its `mcp_urls`, the tools under their own names (no server prefix) and
JSON schemas. A call is the seat's action in the episode; its result is the env's tool message.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import mcp_types as types
import verifiers.v1 as vf
from verifiers.v1.mcp import SharedToolServer

from scope_envs.core.chat import Message, ToolCall, tool_name

__all__ = ["SeatToolset", "SeatToolsetConfig"]


class SeatToolsetConfig(vf.ToolsetConfig):
    pass


class SeatToolset(vf.Toolset[SeatToolsetConfig, vf.State]):
    """One seat's tools: `tools` (OpenAI function schemas) are listed as MCP tools; `act` takes
    the seat's action (an assistant `Message` calling one tool) and returns the tool messages the
    episode answered with."""

    TOOL_PREFIX: ClassVar[str | None] = None

    def __init__(self, tools: list[dict[str, Any]], act: Callable[[Message], list[Message]]) -> None:
        super().__init__(SeatToolsetConfig())
        self.tools = tools
        self.act = act
        self.calls = 0
        self._lock = asyncio.Lock()

    def register(self, mcp: Any) -> None:
        raise TypeError(
            "a SeatToolset acts on a live episode in the env's process: serve it with `serve()`, "
            "not as a verifiers-launched tool server"
        )

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool_name(schema),
                    description=schema["function"].get("description") or None,
                    input_schema=schema["function"].get("parameters") or {"type": "object", "properties": {}},
                )
                for schema in self.tools
            ]
        )

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        # One call at a time: the episode is a conversation, its turns are ordered.
        async with self._lock:
            self.calls += 1
            call = ToolCall.create(params.name, params.arguments or {}, id=f"mcp_{self.calls}")
            answers = await asyncio.to_thread(self.act, Message("assistant", None, tool_calls=(call,)))
        text = "\n".join(m.text for m in answers if m.role == "tool")
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[SharedToolServer]:
        """Serve on a loopback port of this process until the context exits."""
        import uvicorn
        from mcp.server.lowlevel import Server
        from mcp.server.transport_security import TransportSecuritySettings

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = Server("scope", on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        app = server.streamable_http_app(
            json_response=True,
            stateless_http=True,
            # a page in a local browser must not reach it by DNS rebinding: only the loopback host,
            # and no browser origin at all (the harness is not a browser)
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=[f"127.0.0.1:{port}"], allowed_origins=[]
            ),
        )
        web = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
        running = asyncio.create_task(web.serve(sockets=[sock]))
        try:
            while not web.started:
                if running.done():
                    running.result()
                await asyncio.sleep(0.005)
            yield SharedToolServer(url=f"http://127.0.0.1:{port}/mcp", local=True, external=True)
        finally:
            web.should_exit = True
            with contextlib.suppress(Exception):
                await running
            sock.close()
