"""Tool registry: typed Python functions in, OpenAI function schemas and safe, time-limited calls out.

Whatever goes wrong in a call (unknown tool, arguments that do not match the schema, an exception, a timeout)
becomes an error observation for the model to read, never an exception for the caller.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from transformers.utils import get_json_schema

from app.conversation import Attachment

DEFAULT_TIMEOUT_S = 10.0
MAX_OBSERVATION_CHARS = 8_000  # what the model is shown; the UI keeps the whole result
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI-style function names may be


class ToolError(Exception):
    """Raised by a tool for a failure the model should read as-is (no traceback, no exception type)."""


@dataclass
class ToolOutput:
    """What a tool may return instead of plain text: text for the model plus images for the user."""

    text: str
    attachments: list[Attachment] = field(default_factory=list)
    ok: bool = True  # False: the call ran but failed (e.g. the code raised); the text says how


@dataclass
class ToolResult:
    content: str
    ok: bool = True
    duration_s: float = 0.0
    attachments: list[Attachment] = field(default_factory=list)

    def for_model(self) -> str:
        if len(self.content) <= MAX_OBSERVATION_CHARS:
            return self.content
        cut = len(self.content) - MAX_OBSERVATION_CHARS
        return self.content[:MAX_OBSERVATION_CHARS] + f"\n[... {cut} more characters cut]"


@dataclass(frozen=True)
class Tool:
    name: str
    function: Callable[..., Any]
    schema: dict[str, Any]  # OpenAI style: {"type": "function", "function": {name, description, parameters}}
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_cancel: Callable[[], None] | None = None  # stops work a stopped or timed-out call left running
    origin: str = ""  # who provides it, for the user: "" for the app itself, else e.g. "MCP server docs"

    @property
    def description(self) -> str:
        return self.schema["function"].get("description", "")

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]


def schema_for(function: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI function schema of a typed function with a Google-style docstring."""
    schema = copy.deepcopy(get_json_schema(function))
    schema["function"].pop("return", None)
    parameters = schema["function"].setdefault("parameters", {"type": "object", "properties": {}})
    for prop in parameters.get("properties", {}).values():
        # get_json_schema marks Optional[...] with OpenAPI's "nullable"; JSON Schema validators want a type list.
        if prop.pop("nullable", False) and isinstance(prop.get("type"), str):
            prop["type"] = [prop["type"], "null"]
    parameters.setdefault("additionalProperties", False)
    return schema


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI function schema of a tool described elsewhere (e.g. by an MCP server): taken as it is."""
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": copy.deepcopy(parameters)}}


@dataclass
class RunningCall:
    """A tool call running in its own thread; poll `wait()` so the caller can stay responsive to Stop."""

    tool_name: str
    timeout_s: float
    on_cancel: Callable[[], None] | None = None
    started: float = field(default_factory=time.perf_counter)
    _done: threading.Event = field(default_factory=threading.Event)
    _result: ToolResult | None = None

    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    def _finish(self, result: ToolResult) -> None:
        if not self._done.is_set():
            result.duration_s = time.perf_counter() - self.started
            self._result = result
            self._done.set()

    def wait(self, timeout: float | None = None) -> ToolResult | None:
        """The result, or None if it is not ready within `timeout` seconds. Past the deadline: a timeout result."""
        remaining = self.deadline - time.perf_counter()
        limit = remaining if timeout is None else min(timeout, remaining)
        if self._done.wait(max(0.0, limit)):
            return self._result
        if time.perf_counter() >= self.deadline:
            # A Python thread cannot be killed: the call is abandoned and its eventual result ignored.
            self._finish(ToolResult(f"Error: {self.tool_name} timed out after {self.timeout_s:g} s.", ok=False))
            self._stop_work()
            return self._result
        return None

    def _stop_work(self) -> None:
        if self.on_cancel is not None:
            try:
                self.on_cancel()
            except Exception:  # stopping is best effort; the result already says what happened
                pass

    def cancel(self) -> ToolResult:
        if not self._done.is_set():
            self._stop_work()
        self._finish(ToolResult(f"Error: the user stopped {self.tool_name} before it finished.", ok=False))
        assert self._result is not None
        return self._result


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(
        self,
        function: Callable[..., Any],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_cancel: Callable[[], None] | None = None,
    ) -> Tool:
        schema = schema_for(function)
        tool = Tool(schema["function"]["name"], function, schema, timeout_s, on_cancel)
        if tool.name in self._tools and self._tools[tool.name].function != function:
            raise ValueError(f"a different tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def add(self, tool: Tool) -> Tool:
        """Register a ready-made tool (its schema written elsewhere, e.g. by an MCP server), not a typed function."""
        if not TOOL_NAME.fullmatch(tool.name) or tool.schema.get("function", {}).get("name") != tool.name:
            raise ValueError(f"{tool.name!r} is not a valid tool name (letters, digits, _ and -, at most 64) or does "
                             "not match its schema")
        if not isinstance(tool.parameters, dict):
            raise ValueError(f"the parameters of {tool.name} must be a JSON Schema object")
        if tool.name in self._tools and self._tools[tool.name] != tool:
            raise ValueError(f"a different tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools.values())

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def merged(self, other: ToolRegistry) -> ToolRegistry:
        """A registry with the tools of both (the other's win on a name clash)."""
        combined = ToolRegistry()
        combined._tools = {**self._tools, **other._tools}
        return combined

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry with only the named tools (those the user enabled)."""
        chosen = ToolRegistry()
        for name in names:
            if name in self._tools:
                chosen._tools[name] = self._tools[name]
        return chosen

    def schemas(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(tool.schema) for tool in self._tools.values()]

    def validation_error(self, name: str, arguments: Any) -> str | None:
        """Why these arguments cannot be passed to the tool, or None when they can."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return f"Error: there is no tool named {name!r}. Available tools: {known}."
        if not isinstance(arguments, dict):
            return f"Error: the arguments of {name} must be a JSON object."
        errors = sorted(Draft202012Validator(tool.parameters).iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            details = "; ".join(_describe(error) for error in errors[:5])
            return f"Error: invalid arguments for {name}: {details}."
        return None

    def start(self, name: str, arguments: Any) -> RunningCall:
        """Validate, then run the tool in a daemon thread under its time limit."""
        tool = self._tools.get(name)
        timeout_s = tool.timeout_s if tool else 0.0
        running = RunningCall(name, timeout_s, tool.on_cancel if tool else None)
        problem = self.validation_error(name, arguments)
        if problem is not None or tool is None:
            running._finish(ToolResult(problem or "Error: unknown tool.", ok=False))
            return running

        def run() -> None:
            try:
                value = tool.function(**arguments)
                if isinstance(value, ToolOutput):
                    running._finish(ToolResult(value.text, ok=value.ok, attachments=value.attachments))
                else:
                    running._finish(ToolResult(_as_text(value)))
            except ToolError as exc:
                running._finish(ToolResult(f"Error: {exc}", ok=False))
            except Exception as exc:  # every failure is an observation, never a crash of the app
                running._finish(ToolResult(f"Error: {name} failed: {type(exc).__name__}: {exc}", ok=False))

        threading.Thread(target=run, name=f"tool-{name}", daemon=True).start()
        return running

    def call(self, name: str, arguments: Any) -> ToolResult:
        """Run a tool to completion (or its time limit); for callers that need no Stop button."""
        result = self.start(name, arguments).wait()
        assert result is not None
        return result


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.path)
    return f"{where}: {error.message}" if where else error.message


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


default_registry = ToolRegistry()  # filled at import time by the tool modules, read-only afterwards


def register_tool(function: Callable[..., Any] | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S):
    """Decorator: `@register_tool` or `@register_tool(timeout_s=30)` on a typed, documented function."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        default_registry.register(fn, timeout_s=timeout_s)
        return fn

    return decorate(function) if function is not None else decorate
