"""An example MCP server, written with the SDK's server API: mcp.example.json starts it, and the tests use it too.

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

from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver import Image
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import AssistantMessage, Prompt, PromptArgument, UserMessage
from mcp.types import INTERNAL_ERROR, EmbeddedResource, ResourceLink, TextContent, TextResourceContents

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
    return Image(data=_png(), format="png")


@server.tool()
def documents() -> list[TextContent | EmbeddedResource | ResourceLink]:
    """Text, an embedded text resource and a link to another resource."""
    return [
        TextContent(text="Two documents:"),
        EmbeddedResource(resource=TextResourceContents(uri="memo://one", text="The first memo.")),
        ResourceLink(uri="memo://two", name="second-memo", description="The second memo."),
    ]


# ----- prompts and resources ----------------------------------------------------------------------------------

@server.prompt(title="Code review")
def review(code: str, language: str = "python") -> str:
    """Ask for a review of some code."""
    return f"Please review this {language} code:\n\n{code}"


@server.prompt()
def tour(place: str) -> list[Any]:
    """A conversation to start from: a question, an example answer and a picture (which a message box cannot
    take)."""
    return [UserMessage(f"Plan a day in {place}."), AssistantMessage("Start with breakfast by the river."),
            UserMessage(Image(data=_png(), format="png"))]


@server.prompt()
def broken(topic: str) -> str:
    """Fail on every request, as a buggy server does."""
    raise MCPError(INTERNAL_ERROR, f"the prompt about {topic} is out of order")


# A prompt no person could fill in: five hundred arguments.
server.add_prompt(Prompt(name="sprawling", description="Too many arguments.", fn=lambda **values: "unused",
                         arguments=[PromptArgument(name=f"field_{n}", required=n < 3) for n in range(500)]))
# And one that names the same argument twice.
server.add_prompt(Prompt(name="muddled", description="The same argument twice.", fn=lambda **values: "unused",
                         arguments=[PromptArgument(name="topic", required=True), PromptArgument(name="topic")]))


@server.resource("memo://readme", name="readme", title="The demo server's readme", mime_type="text/plain",
                 description="How this server works.")
def readme() -> str:
    return "The demo server answers from examples/mcp_servers/demo_server.py. Remember the word PELICAN."


@server.resource("image://red", name="red-square", mime_type="image/png", description="A small red picture.")
def red_square() -> bytes:
    return _png()


@server.resource("blob://data", name="raw-data", mime_type="application/octet-stream")
def raw_data() -> bytes:
    return bytes(range(256)) * 4


@server.resource("memo://huge", name="huge", mime_type="text/plain", description="More than an upload may be.")
def huge() -> str:
    return "x" * (21 * 2**20)


@server.resource("memo://notes/{topic}", name="notes", mime_type="text/plain")
def notes(topic: str) -> str:
    """Notes about any topic."""
    return f"Notes about {topic}: none yet."


def _png() -> bytes:
    from PIL import Image as PILImage

    buffer = io.BytesIO()
    PILImage.new("RGB", (8, 6), (255, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


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
