"""MCP servers' tools in a ToolRegistry, next to the app's own: each with the server's JSON Schema as its
parameters (so validation and forced calls work as for any tool), its annotations as hints (as far as the server
is trusted: `origin` names it), its outputSchema as the registry's output schema, named to fit and not to clash,
called through the manager's connection to its server. A structured result (structuredContent) is carried in
ToolResult.structured, checked against the output schema by the registry.
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from jsonschema import SchemaError
from mcp import types
from opentelemetry import context as otel_context

from app.config import SchemaLimits
from app.limits.schema_limits import schema_size_problem
from app.limits.schema_validation import check_schema
from app.mcp_client.call_results import to_output
from app.mcp_client.connection import ServerConnection
from app.mcp_client.manager import McpManager
from app.tools.questions import QuestionChannel, current_channel
from app.tools.tool_registry import (
    Tool,
    ToolError,
    ToolHints,
    ToolOutput,
    ToolRegistry,
    function_schema,
    output_validator,
)

logger = logging.getLogger(__name__)

_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64
_GRACE_S = 5.0  # the registry's own limit only backs up the connection's, which says more


def mcp_registry(manager: McpManager, connections: Iterable[ServerConnection],
                 taken: Iterable[str] = ()) -> ToolRegistry:
    """The tools of the connected servers among `connections`. A tool keeps its name (made to fit
    ^[a-zA-Z0-9_-]{1,64}$) unless that clashes with `taken` (the page's other tools) or with another MCP tool:
    then it is called `server_tool`. Tools whose input or output schema is not a usable JSON Schema are left out."""
    found = [(connection, tool, parameters) for connection in connections for tool in connection.tools
             if (parameters := _parameters(connection.name, tool)) is not None
             and _output_schema_usable(connection.name, tool)]
    names = _unique_names([(connection.name, tool.name) for connection, tool, _ in found], set(taken))
    limit = manager.settings.connect_timeout_s + manager.settings.call_timeout_s + _GRACE_S
    registry = ToolRegistry()
    for (connection, tool, parameters), name in zip(found, names, strict=True):
        call, cancel = _caller(manager, connection, tool.name, name, limit, tool.output_schema)
        description = tool.description or tool.title or (tool.annotations.title if tool.annotations else None) or ""
        registry.add(Tool(name, call, function_schema(name, description, parameters), timeout_s=limit,
                          on_cancel=cancel, origin=f"MCP server {connection.name}", hints=_hints(tool),
                          output_schema=copy.deepcopy(tool.output_schema)))
    return registry


def _hints(tool: types.Tool) -> ToolHints:
    """The tool's annotations as hints; its title as MCP ranks them: the tool's own, then the annotations'."""
    notes = tool.annotations or types.ToolAnnotations()
    return ToolHints(read_only=notes.read_only_hint, destructive=notes.destructive_hint,
                     idempotent=notes.idempotent_hint, open_world=notes.open_world_hint,
                     title=tool.title or notes.title)


def _parameters(server: str, tool: types.Tool) -> dict[str, Any] | None:
    schema = copy.deepcopy(tool.input_schema)
    schema.pop("$schema", None)  # the registry validates with draft 2020-12, whatever a server declares
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    try:
        if schema["type"] != "object":
            raise SchemaError("the root is not an object")
        # Sizes first: checking a huge schema against its meta-schema alone takes seconds (640 KB of anyOf: 8 s).
        if (problem := schema_size_problem(schema, SchemaLimits.from_env())) is not None:
            raise SchemaError(problem)
        check_schema(schema)
    except SchemaError as exc:
        logger.warning("MCP server %s: tool %r left out, its input schema is not usable: %s", server, tool.name,
                       exc.message)
        return None
    return schema


def _output_schema_usable(server: str, tool: types.Tool) -> bool:
    """Whether the tool declares no output schema or one that can be checked. The SDK checks every result of a
    tool against its output schema too, and refuses them all when the schema is not valid: such a tool is of no
    use."""
    if tool.output_schema is None:
        return True
    try:
        if (problem := schema_size_problem(tool.output_schema, SchemaLimits.from_env())) is not None:
            raise SchemaError(problem)
        output_validator(tool.output_schema)
    except SchemaError as exc:
        logger.warning("MCP server %s: tool %r left out, its output schema is not usable: %s", server, tool.name,
                       exc.message)
        return False
    return True


def _fit(name: str) -> str:
    return _NOT_ALLOWED.sub("_", name)[:_MAX_NAME] or "tool"


def _unique_names(tools: list[tuple[str, str]], taken: set[str]) -> list[str]:
    """(server, tool) pairs to registry names, in order; the same inputs always give the same names."""
    plain = [_fit(tool) for _, tool in tools]
    counts = Counter(plain)
    used = set(taken)
    names = []
    for (server, _), name in zip(tools, plain, strict=True):
        if name in taken or counts[name] > 1:
            name = _fit(f"{server}_{name}")
        base, number = name, 2
        while name in used:  # e.g. two tool names that only differ in characters a name may not have
            suffix = f"_{number}"
            name, number = base[:_MAX_NAME - len(suffix)] + suffix, number + 1
        used.add(name)
        names.append(name)
    return names


def _result_within(future: concurrent.futures.Future[types.CallToolResult], wait_s: float,
                   questions: QuestionChannel | None) -> types.CallToolResult:
    """The call's result within `wait_s`, not counting the time it waited for the user's answers."""
    started = time.monotonic()
    while True:
        waited = questions.waited_s if questions is not None else 0.0
        left = started + wait_s + waited - time.monotonic()
        asking = questions is not None and questions.pending is not None
        try:
            return future.result(timeout=1.0 if asking else max(0.0, min(left, 1.0)))
        except concurrent.futures.TimeoutError:
            if not asking and left <= 1.0:
                raise


def _caller(manager: McpManager, connection: ServerConnection, tool: str, shown_as: str, wait_s: float,
            output_schema: dict[str, Any] | None = None) -> tuple[Callable[..., ToolOutput], Callable[[], None]]:
    """The tool's function (run in the registry's thread) and what cancels its calls that are still running."""
    running: set[concurrent.futures.Future[types.CallToolResult]] = set()

    def call(**arguments: Any) -> ToolOutput:
        questions = current_channel()  # the server may ask the user something during the call
        # The request's span belongs to the tool call's, current in this thread (ToolRegistry.start).
        future = manager.submit(connection.call(tool, arguments, questions, otel_context.get_current()))
        running.add(future)
        try:
            result = _result_within(future, wait_s, questions)
        except concurrent.futures.CancelledError:
            raise ToolError(f"the call to {shown_as} was cancelled.") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"{shown_as} did not finish within {wait_s:g} s.") from None
        finally:
            running.discard(future)
        # its structured result too, read in the text
        return to_output(result, shown_as, output_schema, manager.settings.max_images)

    def cancel() -> None:
        for future in list(running):
            future.cancel()

    return call, cancel
