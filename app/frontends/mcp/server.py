"""The app's tools as an MCP server: `python -m app.frontends.mcp` (stdio) or `--http` (Streamable HTTP), `make mcp`.

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
of one server shares them: run one server per user (with its own key). The kernel and its sandbox stop when the
process ends (the sandbox dies with the process even when it is killed; the end of stdin, SIGTERM and Ctrl+C also
remove its folder).

Over HTTP, which any process of the machine can reach (127.0.0.1 unless --host says otherwise), the `python` tool
runs code for whoever calls it, so every request must carry a key as a Bearer token, checked by the SDK's own
bearer-auth middleware. The key comes from the file --api-key-file names, else DEMO_MCP_API_KEY, else it is the one
kept in the user's state folder (`server_key_file()`), generated and printed once at the first start. Never from
the command line, which every user of the machine can read (/proc/PID/cmdline): --api-key is refused, saying so.
A browser sends the page's Origin, and a page of any site, or another local web app on another port, could call
the server through the user's browser: a request with an Origin is refused unless --allow-origin (or
DEMO_MCP_ALLOW_ORIGINS) lists it. Clients that are not browsers send no Origin. Stdio needs neither: the client
that starts the process is the only one it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import signal
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import mcp.types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp.types.version import is_version_at_least
from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from pydantic import AnyHttpUrl
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.config import LOCAL_OWNER, HTTPTimeouts, McpSettings, read_key_file, state_dir
from app.domain.media import ImageError, sniff_mime
from app.knowledge.tool import knowledge_tools
from app.limits.http_timeouts import uvicorn_options
from app.storage import StorageError, open_database
from app.storage.knowledge import KnowledgeStore
from app.telemetry.setup import configure_tracing
from app.tools import load_tools
from app.tools.sandbox import isolation
from app.tools.session import SessionTools
from app.tools.tool_registry import RunningCall, Tool, ToolHints, ToolRegistry, ToolResult

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
        # The SDK's middleware has a SERVER span open for this request (a child of the caller's, when the caller
        # sent its trace): the tool's thread starts in it.
        result = await _finish(tools.start(params.name, params.arguments or {}, otel_context.get_current()))
        otel_trace.get_current_span().set_attribute("app.tool.result_chars", len(result.content))
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
    return load_tools().merged(session.registry()).merged(_knowledge())


def _knowledge() -> ToolRegistry:
    """search_knowledge over the local user's documents in the app's database (DEMO_DATABASE_URL), the same ones the
    app's Knowledge page keeps; absent, with the reason on stderr, when that database cannot be opened."""
    try:
        store = KnowledgeStore(open_database())
    except StorageError as exc:
        print(f"search_knowledge is not offered: {exc}", file=sys.stderr)
        return ToolRegistry()
    return knowledge_tools(store, LOCAL_OWNER)


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


class KeyProblem(SystemExit):
    """No usable key: the message says which source was wrong and what to do."""


def server_key_file() -> Path:
    """Where the generated key is kept: the user's state folder (XDG_STATE_HOME)."""
    return state_dir() / "mcp-api-key"


def _read_key(path: Path, what: str) -> str:
    try:
        return read_key_file(path, what)
    except ValueError as exc:
        raise KeyProblem(str(exc)) from None


def api_key(key_file: str | None, from_env: str) -> str:
    """The key every HTTP request must carry: what `key_file` holds, else `from_env` (DEMO_MCP_API_KEY), else the
    key kept in server_key_file(), which the first start generates (mode 0600) and prints, once, on stderr."""
    if key_file:
        return _read_key(Path(key_file).expanduser(), "the key file")
    if from_env:
        return from_env
    path = server_key_file()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made at an earlier start (or by another server starting just now)
        key = _read_key(path, "the generated key file")
        print(f"Clients must send the API key kept in {path} (as `Authorization: Bearer <key>`).", file=sys.stderr)
        return key
    except OSError as exc:
        raise KeyProblem(f"Cannot keep a generated key in {path} ({exc}): set DEMO_MCP_API_KEY or give "
                        "--api-key-file.") from None
    key = secrets.token_urlsafe(32)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(key + "\n")
    print(f"Generated this server's API key, kept in {path} (only you can read it); clients send it as "
          f"`Authorization: Bearer <key>`. It is shown this once:\n{key}", file=sys.stderr)
    return key


def allowed_origin(value: str) -> str:
    """An origin as --allow-origin and DEMO_MCP_ALLOW_ORIGINS take it: scheme://host[:port], lower-cased, no path."""
    parts = urlsplit(value.strip().rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query or parts.fragment \
            or "@" in parts.netloc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an origin: write scheme://host[:port], as "
                                         "http://localhost:5173 (no path; no *)")
    return f"{parts.scheme}://{parts.netloc}".lower()


class _OriginCheck:
    """Refuses (403) every HTTP request whose Origin header is not one of `allowed`. Browsers send the Origin of the
    page that makes a request; other clients send none and are let through (to the key check). The SDK's own check
    only runs when bound to a loopback address, and it lets every loopback origin of any port in."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = Headers(scope=scope).get("origin")
            if origin is not None and origin.rstrip("/").lower() not in self.allowed:
                refusal = PlainTextResponse(f"Origin {origin[:200]} is not allowed: start the server with "
                                            "--allow-origin (or DEMO_MCP_ALLOW_ORIGINS) naming it.", status_code=403)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def http_app(server: Server[Any], host: str, port: int, api_key: str, origins: Iterable[str] = ()) -> ASGIApp:
    """The Streamable HTTP app at /mcp (and GET /health): the key required as a Bearer token, browsers' requests
    from `origins` only (with the CORS headers a page there needs)."""
    base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    # No OAuth server here: the issuer is this server itself, which hands out the one key out of band.
    auth = AuthSettings(issuer_url=AnyHttpUrl(base_url), resource_server_url=None)
    app: ASGIApp = server.streamable_http_app(host=host, auth=auth, token_verifier=_ApiKey(api_key),
                                              custom_starlette_routes=[Route("/health", _health)])
    origins = sorted(set(origins))
    if origins:  # no credentials: the key travels in a header the page sets, never in a cookie
        app = CORSMiddleware(app, allow_origins=origins, allow_methods=["GET", "POST", "DELETE"],
                             allow_headers=["Authorization", "Content-Type", "Accept", "Mcp-Session-Id",
                                            "Mcp-Protocol-Version", "Last-Event-ID"],
                             expose_headers=["Mcp-Session-Id"])
    return _OriginCheck(app, origins)


def serve_http(server: Server[Any], host: str, port: int, api_key: str, origins: Iterable[str] = ()) -> None:
    """Serve Streamable HTTP at http://host:port/mcp (and GET /health) until SIGINT or SIGTERM."""
    import uvicorn

    app = http_app(server, host, port, api_key, origins)
    print(f"Serving MCP (Streamable HTTP) on http://{f'[{host}]' if ':' in host else host}:{port}/mcp",
          file=sys.stderr)
    # Shutdown waits at most 2 s for open streams; requests that never arrive whole are cut
    # (app/limits/http_timeouts.py).
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=2,
                **uvicorn_options(HTTPTimeouts.from_env()))


def main(argv: list[str] | None = None) -> None:
    settings = McpSettings.from_env()
    configure_tracing()  # its tool calls' spans, exported where OTEL_* asks for it
    parser = argparse.ArgumentParser(description="The demo's tools (built-in, python, browser) as an MCP server: "
                                                 "stdio by default, Streamable HTTP with --http.")
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--host", default="127.0.0.1", help="with --http: the address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8765, help="with --http: the port (default: %(default)s)")
    parser.add_argument("--api-key-file", metavar="PATH",
                        help="with --http: require the key this file holds as a Bearer token (else DEMO_MCP_API_KEY, "
                             f"else one generated and kept in {server_key_file()})")
    parser.add_argument("--api-key", help=argparse.SUPPRESS)  # refused below, with what to do instead
    parser.add_argument("--allow-origin", metavar="ORIGIN", action="append", type=allowed_origin,
                        default=[], help="with --http: accept browser requests from this origin (repeatable; env "
                                         "DEMO_MCP_ALLOW_ORIGINS); others are refused")
    args = parser.parse_args(argv)
    if args.api_key is not None:
        parser.error("--api-key is not taken: on the command line every user of this machine can read the key "
                     "(ps, /proc/PID/cmdline). Put it in DEMO_MCP_API_KEY or in a file named by --api-key-file, or "
                     f"give neither to use a generated one (kept in {server_key_file()}).")
    origins = list(args.allow_origin)
    for value in settings.server_allow_origins:
        try:
            origins.append(allowed_origin(value))
        except argparse.ArgumentTypeError as exc:
            parser.error(f"DEMO_MCP_ALLOW_ORIGINS: {exc}")
    key = api_key(args.api_key_file, settings.server_api_key) if args.http else ""

    session = SessionTools()
    exit_on_signals(session)
    try:
        tools = offered_tools(session)
        print(f"MCP tools: {', '.join(tools.names)}", file=sys.stderr)
        server = build_server(tools)
        if args.http:
            serve_http(server, args.host, args.port, key, origins)
        else:
            serve_stdio(server)
    finally:
        session.close()
