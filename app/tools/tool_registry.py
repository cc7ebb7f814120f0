"""Tool registry: typed Python functions in, OpenAI function schemas and safe, time-limited calls out.

Whatever goes wrong in a call (unknown tool, arguments that do not match the schema, an exception, a timeout)
becomes an error observation for the model to read, never an exception for the caller.

A tool may also say what it does to the world (`ToolHints`, MCP's tool annotations) and declare the JSON Schema of
a structured result (`output_schema`) that its calls return next to their text (`ToolResult.structured`).
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from jsonschema import SchemaError
from opentelemetry import context as otel_context
from transformers.utils import get_json_schema

from app.domain.conversation import Attachment
from app.limits.schema_validation import SchemaValidator
from app.limits.schema_validation import describe as _describe
from app.tools.questions import QuestionChannel
from app.tools.questions import bind as bind_questions

DEFAULT_TIMEOUT_S = 10.0
MAX_OBSERVATION_CHARS = 8_000  # what the model is shown; the UI keeps the whole result
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI-style function names may be


class ToolError(Exception):
    """Raised by a tool for a failure the model should read as-is (no traceback, no exception type)."""


@dataclass(frozen=True)
class EffectiveHints:
    """What a tool is taken to do once MCP's defaults fill in what its hints leave unsaid."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


@dataclass(frozen=True)
class ToolHints:
    """What a tool says about its effects: MCP's tool annotations. None means "not said", and then MCP's defaults
    apply (see `effective`): a tool that says nothing may change and destroy things, out in the open world.

    They are hints, as trustworthy as whoever wrote them: the app's own tools are annotated here, an MCP server's
    tools by that server (`Tool.origin` says which).
    """

    read_only: bool | None = None  # changes nothing in its environment
    destructive: bool | None = None  # may delete or overwrite (as opposed to only adding); moot when read-only
    idempotent: bool | None = None  # a second call with the same arguments changes nothing more; moot when read-only
    open_world: bool | None = None  # reaches outside entities (the web, an API), not only a closed domain of its own
    title: str | None = None  # a name for people

    @classmethod
    def reader(cls, title: str, *, open_world: bool) -> ToolHints:
        """The hints of a tool that only reads or computes, said in full (for clients that do not know that
        destructive and idempotent are moot for a read-only tool)."""
        return cls(read_only=True, destructive=False, idempotent=True, open_world=open_world, title=title)

    @property
    def effective(self) -> EffectiveHints:
        """The hints with MCP's defaults for what is not said: not read-only, destructive, not idempotent, open
        world. A read-only tool is neither destructive nor anything but idempotent, whatever it says about those: a
        tool that changes nothing cannot destroy anything, nor change anything on a second call."""
        read_only = bool(self.read_only)
        return EffectiveHints(
            read_only=read_only,
            destructive=False if read_only else self.destructive is not False,
            idempotent=True if read_only else self.idempotent is True,
            open_world=self.open_world is not False,
        )


@dataclass
class ToolOutput:
    """What a tool may return instead of plain text: text for the model plus images for the user, and the result's
    values as a JSON object (`structured`, matching the tool's output schema) for programs."""

    text: str
    attachments: list[Attachment] = field(default_factory=list)
    ok: bool = True  # False: the call ran but failed (e.g. the code raised); the text says how
    structured: dict[str, Any] | None = None


@dataclass
class ToolResult:
    content: str
    ok: bool = True
    duration_s: float = 0.0
    attachments: list[Attachment] = field(default_factory=list)
    structured: dict[str, Any] | None = None  # the same result as a JSON object, where the tool gives one

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
    hints: ToolHints = field(default_factory=ToolHints)
    output_schema: dict[str, Any] | None = None  # the JSON Schema of ToolResult.structured, where it is declared

    @property
    def description(self) -> str:
        description: str = self.schema["function"].get("description", "")
        return description

    @property
    def parameters(self) -> dict[str, Any]:
        parameters: dict[str, Any] = self.schema["function"]["parameters"]
        return parameters


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
    questions: QuestionChannel = field(default_factory=QuestionChannel)  # what the call asks the user mid-way
    _done: threading.Event = field(default_factory=threading.Event)
    _result: ToolResult | None = None

    @property
    def deadline(self) -> float:
        """When the call times out: its time limit, not counting the time it waited for the user's answers."""
        return self.started + self.timeout_s + self.questions.waited_s

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
        if time.perf_counter() >= self.deadline and self.questions.pending is None:
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
        running = not self._done.is_set()
        # The result first: whatever the call does once told to stop (a cancelled question) comes too late.
        self._finish(ToolResult(f"Error: the user stopped {self.tool_name} before it finished.", ok=False))
        if running:
            self.questions.cancel()
            self._stop_work()
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
        hints: ToolHints | None = None,
        output_schema: dict[str, Any] | None = None,
    ) -> Tool:
        """Register a typed, documented function. With `output_schema` (a JSON Schema whose root is an object, as
        MCP requires before its 2026-07-28 version), the function returns a ToolOutput whose `structured` matches
        it."""
        if output_schema is not None:
            _check_output_schema(output_schema)
        schema = schema_for(function)
        tool = Tool(schema["function"]["name"], function, schema, timeout_s, on_cancel, hints=hints or ToolHints(),
                    output_schema=output_schema)
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
        if tool.output_schema is not None and not isinstance(tool.output_schema, dict):
            raise ValueError(f"the output schema of {tool.name} must be a JSON Schema object")
        if tool.name in self._tools and self._tools[tool.name] != tool:
            raise ValueError(f"a different tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def add_marked(self, function: Callable[..., Any]) -> Tool:
        """Register a function `@register_tool` marked, with the options it gave."""
        options = tool_options(function)
        if options is None:
            raise ValueError(f"{getattr(function, '__qualname__', function)!r} is not marked with @register_tool")
        return self.register(function, timeout_s=options.timeout_s, hints=options.hints,
                             output_schema=options.output_schema)

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
        # The schema may come from an MCP server or an API client: app/limits/schema_validation.py fetches no $ref and
        # bounds its regexes.
        try:
            errors = SchemaValidator(tool.parameters).errors(arguments)
        except SchemaError as exc:
            return f"Error: the parameters schema of {name} cannot be used: {exc.message}."
        if errors:
            details = "; ".join(_describe(error) for error in errors[:5])
            return f"Error: invalid arguments for {name}: {details}."
        return None

    def start(self, name: str, arguments: Any, trace: otel_context.Context | None = None) -> RunningCall:
        """Validate, then run the tool in a daemon thread under its time limit. `trace`: the OpenTelemetry context
        current in that thread (the call's span, for the tool's own spans to belong to); the caller's by default."""
        tool = self._tools.get(name)
        timeout_s = tool.timeout_s if tool else 0.0
        running = RunningCall(name, timeout_s, tool.on_cancel if tool else None)
        problem = self.validation_error(name, arguments)
        if problem is not None or tool is None:
            running._finish(ToolResult(problem or "Error: unknown tool.", ok=False))
            return running

        caller_context = otel_context.get_current() if trace is None else trace

        def run() -> None:
            bind_questions(running.questions)  # a tool that asks the user finds its call's channel here
            otel_context.attach(caller_context)  # the thread ends with the call: nothing to detach
            try:
                value = tool.function(**arguments)
                if isinstance(value, ToolOutput):
                    running._finish(_result(tool, value))
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


def _result(tool: Tool, output: ToolOutput) -> ToolResult:
    """A tool's output as its result. A structured result that does not match the tool's output schema is left out
    and the text says so: the text is the result the model reads, and it stands on its own."""
    text, structured = output.text, output.structured
    if structured is not None and tool.output_schema is not None:
        problem = _structured_problem(tool.output_schema, structured)
        if problem is not None:
            text, structured = f"{text}\n[The structured result was left out: {problem}.]", None
    return ToolResult(text, ok=output.ok, attachments=output.attachments, structured=structured)


def output_validator(schema: Mapping[str, Any]) -> SchemaValidator:
    """A validator for a tool's output schema (app/limits/schema_validation.py: the draft its $schema names, 2020-12
    when none, as MCP says; nothing fetched, regexes bounded). SchemaError when it is not a valid JSON Schema."""
    return SchemaValidator(schema)


def _check_output_schema(schema: Any) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError("an output schema must be a JSON Schema whose root has \"type\": \"object\"")
    try:
        output_validator(schema)
    except SchemaError as exc:
        raise ValueError(f"the output schema is not a valid JSON Schema: {exc.message}") from None


def _structured_problem(schema: Mapping[str, Any], structured: Any) -> str | None:
    """Why `structured` does not match `schema`, or None when it does."""
    try:
        errors = output_validator(schema).errors(structured)
    except SchemaError as exc:
        return f"the tool's output schema cannot be used ({exc.message})"
    if errors:
        return f"it does not match the tool's output schema ({_describe(errors[0])})"
    return None


def json_number(value: object) -> int | float | None:
    """`value` if it is a number JSON can hold, else None: JSON has no NaN or infinity, and a structured result
    carries None where its text shows "nan" or "inf"."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if isinstance(value, int) or math.isfinite(value) else None



def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


@dataclass(frozen=True)
class ToolOptions:
    """What `@register_tool` says about a function, for the registry that takes it in (`ToolRegistry.add_marked`)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    hints: ToolHints | None = None
    output_schema: dict[str, Any] | None = None


_OPTIONS = "__tool_options__"


_Function = TypeVar("_Function", bound=Callable[..., Any])


@overload
def register_tool(function: _Function, *, timeout_s: float = DEFAULT_TIMEOUT_S, hints: ToolHints | None = None,
                  output_schema: dict[str, Any] | None = None) -> _Function: ...


@overload
def register_tool(function: None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S, hints: ToolHints | None = None,
                  output_schema: dict[str, Any] | None = None) -> Callable[[_Function], _Function]: ...


def register_tool(function: _Function | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                  hints: ToolHints | None = None,
                  output_schema: dict[str, Any] | None = None) -> _Function | Callable[[_Function], _Function]:
    """Decorator: `@register_tool` or `@register_tool(timeout_s=30, hints=ToolHints(...), output_schema={...})` on a
    typed, documented function (see `ToolRegistry.register`) marks it as a tool with those options and returns it
    unchanged. It registers nothing by itself: app/tools/__init__.py names the built-in tools, and takes in the
    marked functions of app/tools/custom.py."""

    def decorate(fn: _Function) -> _Function:
        setattr(fn, _OPTIONS, ToolOptions(timeout_s, hints, output_schema))
        return fn

    return decorate(function) if function is not None else decorate


def tool_options(function: Callable[..., Any]) -> ToolOptions | None:
    """The options `@register_tool` marked `function` with; None for a function it did not mark."""
    options = getattr(function, _OPTIONS, None)
    return options if isinstance(options, ToolOptions) else None


def marked_tools(namespace: Mapping[str, Any]) -> list[Callable[..., Any]]:
    """The functions of a module's namespace that `@register_tool` marked, in the order they are defined (imported
    ones left out)."""
    module = namespace.get("__name__")
    return [value for value in namespace.values()
            if callable(value) and tool_options(value) is not None and getattr(value, "__module__", None) == module]
