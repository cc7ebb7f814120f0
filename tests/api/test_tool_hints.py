"""MCP tool annotations and structured results, as the app's MCP client (app/mcp_client) brings them into the
registry: from a small server written here with the SDK's low-level API (started over stdio, as mcp.json would:
`python -m tests.api.test_tool_hints`), and from the app's own MCP server, whose hints must come back as they left.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from app.config import McpSettings
from app.mcp_client import McpManager, StdioServer, mcp_registry
from app.tools import load_tools
from app.tools.tool_registry import EffectiveHints, ToolHints
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(300)  # a safety net: servers start as processes, on a machine that may be busy

MEASUREMENT = {"type": "object", "properties": {"value": {"type": "number"}, "unit": {"type": "string"}},
               "required": ["value", "unit"]}


def _tool(name: str, **fields: Any) -> types.Tool:
    return types.Tool(name=name, description=f"The {name} tool.", input_schema={"type": "object"}, **fields)


TOOLS = [
    _tool("lookup", annotations=types.ToolAnnotations(title="Look it up", read_only_hint=True,
                                                      open_world_hint=False)),
    _tool("erase", annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                                     idempotent_hint=True, open_world_hint=False)),
    _tool("titled", title="Its own title", annotations=types.ToolAnnotations(title="The annotations' title")),
    _tool("plain"),  # says nothing
    _tool("measure", output_schema=MEASUREMENT),
    _tool("liar", output_schema=MEASUREMENT),  # its structured result does not match its schema
    _tool("broken_schema", output_schema={"type": "object", "properties": {"value": {"type": "numeric"}}}),
]
RESULTS = {
    "measure": types.CallToolResult(content=[types.TextContent(text="3 m")], structured_content={"value": 3,
                                                                                                  "unit": "m"}),
    "liar": types.CallToolResult(content=[types.TextContent(text="3 m")], structured_content={"value": "three",
                                                                                               "unit": "m"}),
}


def hints_server() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return RESULTS.get(params.name) or types.CallToolResult(content=[types.TextContent(text=f"{params.name} ran")])

    return Server("hints", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture(scope="module")
def manager() -> Iterator[McpManager]:
    servers = {"hints": StdioServer(command=sys.executable, args=["-m", "tests.api.test_tool_hints"], cwd=str(ROOT))}
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers=servers)
    mcp.refresh(mcp.connections())
    yield mcp
    mcp.close()


def test_annotations_become_the_tools_hints(manager):
    registry = mcp_registry(manager, manager.connections())
    assert registry.names == ["lookup", "erase", "titled", "plain", "measure", "liar"]  # broken_schema: left out
    assert registry.get("lookup").hints == ToolHints(read_only=True, open_world=False, title="Look it up")
    assert registry.get("lookup").hints.effective == EffectiveHints(read_only=True, destructive=False,
                                                                    idempotent=True, open_world=False)
    erase = registry.get("erase").hints
    assert erase == ToolHints(read_only=False, destructive=True, idempotent=True, open_world=False)
    assert erase.effective == EffectiveHints(read_only=False, destructive=True, idempotent=True, open_world=False)
    assert registry.get("titled").hints.title == "Its own title"  # MCP ranks the tool's title first
    # A tool that says nothing is taken as MCP's defaults say: it may destroy things, out in the open world.
    plain = registry.get("plain").hints
    assert plain == ToolHints() and plain.effective == EffectiveHints(read_only=False, destructive=True,
                                                                      idempotent=False, open_world=True)
    assert registry.get("measure").output_schema == MEASUREMENT and registry.get("plain").output_schema is None


def test_a_structured_result_arrives_in_the_tool_result(manager):
    registry = mcp_registry(manager, manager.connections())
    measured = registry.call("measure", {})
    assert measured.ok and measured.structured == {"value": 3, "unit": "m"}
    assert measured.content == '3 m\n{"value": 3, "unit": "m"}'  # the model reads the structured result too
    Draft202012Validator(MEASUREMENT).validate(measured.structured)
    plain = registry.call("plain", {})
    assert plain.ok and plain.content == "plain ran" and plain.structured is None


def test_a_structured_result_that_breaks_its_schema_fails_the_call_without_a_crash(manager):
    # The SDK's client checks results against the listed outputSchema itself and refuses this one, so the call
    # fails with the reason; the server stays connected.
    liar = mcp_registry(manager, manager.connections()).call("liar", {})
    assert not liar.ok and liar.structured is None
    assert liar.content.startswith("Error: the MCP server 'hints' sent an invalid result: RuntimeError: Invalid "
                                   "structured content returned by tool liar: 'three' is not of type 'number'")
    assert manager.connections()[0].status().state == "connected"


def test_a_result_past_the_sdks_check_is_checked_again_and_keeps_its_text():
    """Should a result reach the registry unchecked (the SDK only checks tools it has listed), the registry checks
    it against the tool's output schema: the text stays, the structured result goes, and the text says why."""

    async def call(tool: str, arguments: dict[str, Any], questions: Any = None, trace: Any = None
                   ) -> types.CallToolResult:
        return RESULTS[tool]

    server = SimpleNamespace(name="unchecked", tools=tuple(TOOLS[4:6]), call=call)
    mcp = McpManager(McpSettings(), servers={})
    try:
        registry = mcp_registry(mcp, [server])  # type: ignore[list-item]
        assert registry.call("measure", {}).structured == {"value": 3, "unit": "m"}
        liar = registry.call("liar", {})
    finally:
        mcp.close()
    assert liar.ok and liar.structured is None
    assert liar.content == ("3 m\n[The structured result was left out: it does not match the tool's output schema "
                            "(value: 'three' is not of type 'number').]")


def test_the_apps_own_server_hints_come_back_as_they_left(tmp_path_factory):
    """The app's MCP client on the app's MCP server: every tool's hints and output schema survive the trip, and a
    structured result arrives as the registry made it."""
    sessions = tmp_path_factory.mktemp("hints")  # short: the kernel's sockets are named by paths inside it
    spec = StdioServer(command=sys.executable, args=["-m", "app.frontends.mcp"], cwd=str(ROOT),
                       env={"DEMO_SESSIONS_DIR": str(sessions)})
    mcp = McpManager(McpSettings(connect_timeout_s=60), servers={"app": spec})
    try:
        mcp.refresh(mcp.connections())
        remote = mcp_registry(mcp, mcp.connections())
        builtin = load_tools()
        assert set(builtin.names) <= set(remote.names) and {"python", "web_search"} <= set(remote.names)
        for tool in builtin:
            assert (remote.get(tool.name).hints, remote.get(tool.name).output_schema) == (tool.hints,
                                                                                          tool.output_schema)
        assert remote.get("python").hints.effective == EffectiveHints(read_only=False, destructive=False,
                                                                      idempotent=False, open_world=False)
        converted = remote.call("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"})
        local = builtin.call("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"})
        assert converted.structured == local.structured
        # The app's own text says what its structured result holds; through MCP the model reads both.
        assert converted.content == f"{local.content}\n{json.dumps(local.structured, ensure_ascii=False)}"
    finally:
        mcp.close()


if __name__ == "__main__":  # the test server, over stdio

    async def _serve() -> None:
        server = hints_server()
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    asyncio.run(_serve())
