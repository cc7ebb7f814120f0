"""A real MCP server for the tests, written with the SDK's server API.

    python demo_server.py stdio                  # over stdin/stdout, as mcp.json starts it
    python demo_server.py http PORT [TOKEN]      # Streamable HTTP on 127.0.0.1:PORT/mcp, bearer TOKEN if given

The HTTP server stops by itself when its stdin closes (the test process that started it is gone) or after ten
minutes, whichever comes first.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Image
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents

server = MCPServer("demo", log_level="CRITICAL")  # quiet: failing on purpose is what these tools are for
_calls = 0  # tool calls this process has run: shows that refused arguments never reach the server


def counted(function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        global _calls
        _calls += 1
        return function(*args, **kwargs)

    wrapper.__name__, wrapper.__doc__, wrapper.__annotations__ = (function.__name__, function.__doc__,
                                                                   function.__annotations__)
    wrapper.__wrapped__ = function  # type: ignore[attr-defined]
    return wrapper


@server.tool()
@counted
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
@counted
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
@counted
def paint(color: Literal["red", "green", "blue"], coats: int, note: str) -> str:
    """Paint the wall."""
    return f"{coats} coat(s) of {color}"


@server.tool()
@counted
def calculator(expression: str) -> str:
    """A calculator of its own (its name clashes with the app's built-in one)."""
    return f"demo calculator: {expression}"


@server.tool()
def process_id() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def calls_seen() -> int:
    """How many counted tool calls this server has run."""
    return _calls


@server.tool()
def crash() -> str:
    """Exit in the middle of the call, as a crashing server does."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "woke up"


@server.tool()
def fail() -> str:
    """Always fail."""
    raise ToolError("the sky is falling")  # the SDK passes a ToolError's message on (other exceptions: a generic one)


@server.tool()
def picture() -> Image:
    """A small red picture."""
    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.new("RGB", (8, 6), (255, 0, 0)).save(buffer, "PNG")
    return Image(data=buffer.getvalue(), format="png")


@server.tool()
def documents() -> list[TextContent | EmbeddedResource | ResourceLink]:
    """Text, an embedded text resource and a link to another resource."""
    return [
        TextContent(text="Two documents:"),
        EmbeddedResource(resource=TextResourceContents(uri="memo://one", text="The first memo.")),
        ResourceLink(uri="memo://two", name="second-memo", description="The second memo."),
    ]


def _guarded(app: Any, token: str) -> Any:
    """`app` answering 401 to any HTTP request without `Authorization: Bearer <token>`."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def _stop_when_orphaned() -> None:
    threading.Timer(600, os._exit, (0,)).start()

    def watch() -> None:
        sys.stdin.buffer.read()  # returns at EOF: whoever started us is gone
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
    if sys.argv[1] == "stdio":
        server.run("stdio")
        return
    import uvicorn

    port, token = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "")
    _stop_when_orphaned()
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(_guarded(app, token) if token else app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
