"""The app's tools as an MCP server: `python -m app.mcp_server` (stdio) or `--http` (Streamable HTTP), `make mcp`.

It offers the built-in tools (`load_tools()`), the sandboxed `python` interpreter and the browser tools
(`web_search`, `open_url`, `mclick`; `generate_image` too when an image API is configured), each with the
registry's JSON Schema as its inputSchema, its hints as annotations (read-only, destructive, idempotent, open-world,
and its title) and, where it gives a structured result, its outputSchema. Calls go through the registry: arguments
are validated (invalid ones, and any failure, come back as a tool result with isError set), the tool runs under its
time limit, and images (plots) come back as PNG image content after the text; a structured result comes back as
structuredContent.

The SDK's server negotiates the initialize handshake's versions (2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25: a
client asking for another one is offered 2025-11-25) and the stateless 2026-07-28 (server/discover). Annotations
came in 2025-03-26 and structured results in 2025-06-18; older clients ignore the fields they do not know.

State is per server process, not per MCP session: in the SDK (mcp 2.3) a handler's context does not reach its
connection's state, and the 2026-07-28 protocol the SDK's client speaks by default has no sessions at all. Over
stdio a process serves one client, so each client has its own kernel and browser history. Over HTTP every client
of one server shares them: run one server per user (with its own --api-key). The kernel and its sandbox stop when
the process ends (the sandbox dies with the process even when it is killed; the end of stdin, SIGTERM and Ctrl+C
also remove its folder).

The server binds 127.0.0.1 unless --host says otherwise; with --api-key (or DEMO_MCP_API_KEY) every HTTP request
must carry it as a Bearer token, checked by the SDK's own bearer-auth middleware.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import secrets
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp.types.version import is_version_at_least
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.config import HTTPTimeouts, McpSettings
from app.http_timeouts import uvicorn_options
from app.media import ImageError, sniff_mime
from app.tools import load_tools
from app.tools.registry import RunningCall, Tool, ToolHints, ToolRegistry, ToolResult
from app.tools.sandbox import isolation
from app.tools.session import SessionTools

_POLL_S = 0.5  # how often a waiting call checks whether the client cancelled it
_STRUCTURED_SINCE = "2025-06-18"  # the protocol version that brought outputSchema and structuredContent
_CLOSE_WAIT_S = 10.0  # on SIGTERM, how long cleanup may take (an interrupted cell lets go of the kernel)
_INSTRUCTIONS = (
    "Tools of the composite LLM demo. `python` keeps its variables between calls (one sandboxed kernel per server "
    "process: over HTTP its clients share it) and returns matplotlib plots as images. Results of `web_search`, "
    "`open_url` and `mclick` are numbered so that you can cite them as [n]."
)


def build_server(tools: ToolRegistry) -> Server[Any]:
    """A low-level MCP server offering `tools`: the registry's schemas as inputSchemas, its hints as annotations,
    its output schemas as outputSchemas, its calls as tool calls."""
    listing = types.ListToolsResult(tools=[_listed(tool) for tool in tools])

    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listing

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in tools:
            # The spec's line: a tool that does not exist is a protocol error; what a tool does wrong is a result.
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        result = await _finish(tools.start(params.name, params.arguments or {}))
        return _as_mcp_result(result, ctx.protocol_version)

    def input_schema(name: str) -> Mapping[str, Any] | None:
        tool = tools.get(name)
        return tool.parameters if tool else None

    return Server("composite-llm-demo", instructions=_INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool, get_tool_input_schema=input_schema)


async def _finish(running: RunningCall) -> ToolResult:
    """Wait for a call off the event loop; a call the client cancels is stopped (a running cell is interrupted)."""
    try:
        while (result := await asyncio.to_thread(running.wait, _POLL_S)) is None:
            pass
    except asyncio.CancelledError:
        running.cancel()
        raise
    return result


def _listed(tool: Tool) -> types.Tool:
    """A registry tool as MCP lists it; a tool whose hints say nothing has no annotations."""
    hints = tool.hints
    annotations = None if hints == ToolHints() else types.ToolAnnotations(
        title=hints.title, read_only_hint=hints.read_only, destructive_hint=hints.destructive,
        idempotent_hint=hints.idempotent, open_world_hint=hints.open_world)
    return types.Tool(name=tool.name, title=hints.title, description=tool.description, input_schema=tool.parameters,
                      output_schema=tool.output_schema, annotations=annotations)


def _as_mcp_result(result: ToolResult, protocol_version: str) -> types.CallToolResult:
    """The text first, then each picture (a plot) as image content, and the structured result as structuredContent;
    a failed call has isError set."""
    content: list[types.ContentBlock] = [types.TextContent(text=result.content)]
    if result.structured is not None and not is_version_at_least(protocol_version, _STRUCTURED_SINCE):
        # The spec asks for the structured result as JSON text too, for clients that predate structuredContent.
        # Only those get it: the others read structuredContent, and a second text block would double what their
        # model reads (clients join text blocks), where the text above already says the same in words.
        content.append(types.TextContent(text=json.dumps(result.structured, ensure_ascii=False)))
    for attachment in result.attachments:
        if attachment.kind != "image":
            continue
        try:
            mime = sniff_mime(attachment.data)
        except ImageError:  # not a picture a client could show
            continue
        content.append(types.ImageContent(data=base64.b64encode(attachment.data).decode("ascii"), mime_type=mime))
    return types.CallToolResult(content=content, structured_content=result.structured, is_error=not result.ok)


def offered_tools(session: SessionTools) -> ToolRegistry:
    """The built-in tools and the session's own; says on stderr what the python tool runs in, or why it is absent."""
    problem = session.python_unavailable
    if problem:
        print(f"The python tool is not offered: {problem}", file=sys.stderr)
    else:
        print(f"The python tool runs in {isolation.describe(session.kernel.limits)}.", file=sys.stderr)
    return load_tools().merged(session.registry())


# ----- transports --------------------------------------------------------------------------------------------------

def exit_on_signals(session: SessionTools) -> None:
    """On SIGTERM or Ctrl+C, stop the kernel and leave. Over HTTP this runs after uvicorn's graceful shutdown (uvicorn
    re-raises the signal it caught, which would otherwise end the process before any `finally`); over stdio at once,
    because the transport reads stdin in a thread that cancellation cannot interrupt, so unwinding the event loop
    could wait forever for input."""

    def close() -> None:
        session.kernel.interrupt()  # a running cell holds the kernel until it ends
        session.close()

    def stop(signum: int, _frame: object) -> None:
        closer = threading.Thread(target=close, daemon=True)
        closer.start()
        closer.join(_CLOSE_WAIT_S)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)  # die of it, as a parent (a shell, make, the client) expects

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over stdin/stdout until it closes stdin."""

    async def run() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    asyncio.run(run())


class _ApiKey:
    """A TokenVerifier for one static key: the SDK's bearer middleware asks it about every request's token."""

    def __init__(self, key: str) -> None:
        self._key = key.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if secrets.compare_digest(token.encode(), self._key):
            return AccessToken(token=token, client_id="api-key", scopes=[])
        return None


async def _health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def serve_http(server: Server[Any], host: str, port: int, api_key: str | None) -> None:
    """Serve Streamable HTTP at http://host:port/mcp (and GET /health) until SIGINT or SIGTERM."""
    import uvicorn

    base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    # No OAuth server here: the issuer is this server itself, which hands out the one key out of band.
    auth = AuthSettings(issuer_url=AnyHttpUrl(base_url), resource_server_url=None) if api_key else None
    app = server.streamable_http_app(host=host, auth=auth, token_verifier=_ApiKey(api_key) if api_key else None,
                                     custom_starlette_routes=[Route("/health", _health)])
    if not api_key and host not in ("127.0.0.1", "localhost", "::1"):
        print(f"Warning: {host} without --api-key: anyone who can reach this port can run code in the sandbox.",
              file=sys.stderr)
    print(f"Serving MCP (Streamable HTTP) on {base_url}/mcp", file=sys.stderr)
    # Shutdown waits at most 2 s for open streams; requests that never arrive whole are cut (app/http_timeouts.py).
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2,
                **uvicorn_options(HTTPTimeouts.from_env()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The demo's tools (built-in, python, browser) as an MCP server: "
                                                 "stdio by default, Streamable HTTP with --http.")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--host", default="127.0.0.1", help="with --http: the address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8765, help="with --http: the port (default: %(default)s)")
    parser.add_argument("--api-key", default=McpSettings.from_env().server_api_key or None,
                        help="with --http: require this key as a Bearer token (env DEMO_MCP_API_KEY)")
    args = parser.parse_args(argv)

    session = SessionTools()
    exit_on_signals(session)
    try:
        tools = offered_tools(session)
        print(f"MCP tools: {', '.join(tools.names)}", file=sys.stderr)
        server = build_server(tools)
        if args.http:
            serve_http(server, args.host, args.port, args.api_key)
        else:
            serve_stdio(server)
    finally:
        session.close()


if __name__ == "__main__":
    main()
