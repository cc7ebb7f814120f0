"""What every tool-call dialect provides, and the parts they share.

A dialect knows four things about a model family: which chat templates speak it (`detects`), how tools, past calls
and tool results go into the prompt (`render`), what a call looks like in the model's output (`stream_parser`,
which also gives the final parse), and the exact text of a call (`constrained_call`, used to force a call with a
grammar). Each one has a line in app/prompting/dialects/__init__.py's `DIALECTS`.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from app.domain.chat_messages import ChatMessage, TemplateMessage
from app.domain.conversation import CallFragment, ToolCall, new_call_id
from app.limits.json_limits import loads_bounded
from app.prompting.code_blocks import CODE_FENCE_CLOSE, CODE_FENCE_OPEN

FALLBACK_TOOLS_INTRO = "You are a helpful, concise assistant."


@dataclass
class ParsedResponse:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(frozen=True)
class ConstrainedCall:
    """One allowed call: literal `prefix`, then JSON matching `schema` (the tool's parameters), then `suffix`.

    With `body_argument` set, the middle is free text instead of JSON (anything without a Markdown fence) and
    becomes that one argument: how a code tool is forced (see `code_call`)."""

    name: str
    prefix: str
    schema: dict[str, Any]
    suffix: str
    body_argument: str | None = None


def code_argument(tool: dict[str, Any]) -> str | None:
    """The parameter of a code tool (a single required string parameter named "code"), or None."""
    parameters = tool["function"].get("parameters") or {}
    properties = parameters.get("properties") or {}
    if list(properties) == ["code"] and properties["code"].get("type") == "string":
        return "code"
    return None


def code_call(tool: dict[str, Any], lead: str = "") -> ConstrainedCall:
    """A forced call to a code tool is written as a fenced Python block, the way models write code anyway, and not
    as a JSON-escaped string: small models end such a string after one line (SmolLM2 wrote only the import) but
    write whole programs in a fence. GLM-4's own python tool call has the same shape."""
    name = tool["function"]["name"]
    return ConstrainedCall(name, lead + CODE_FENCE_OPEN, {}, CODE_FENCE_CLOSE, body_argument="code")


@dataclass
class RenderedPrompt:
    """Messages and tools ready for `tokenizer.apply_chat_template(messages, tools=tools)`."""

    messages: list[TemplateMessage]
    tools: list[dict[str, Any]] | None


class StreamParser(ABC):
    """Splits a streamed reply into visible text and tool calls.

    `feed` returns the text that can be shown now, holding back anything that may still turn out to be a call;
    `finish` returns the rest of the visible text and the final parse. The visible pieces joined (stripped) are
    always the final content, however the stream was chunked. With `max_calls` set, a dialect that finds calls as
    they are written stops reading at the end of the last call allowed (`complete`): the rest of that chunk too.
    """

    def __init__(self, tool_names: Sequence[str]) -> None:
        self.tool_names = tuple(tool_names)
        self.calls: list[ToolCall] = []
        self.shown: list[str] = []
        self.max_calls: int | None = None  # the most calls a reply may make (1: no parallel calls); None: any number
        self._announced = 0  # calls already handed out as fragments

    @property
    def complete(self) -> bool:
        """The reply has made all the calls it may (`max_calls`): what follows is not read."""
        return self.max_calls is not None and len(self.calls) >= self.max_calls

    def feed(self, chunk: str) -> str:
        if self.complete:
            return ""
        visible = self._feed(chunk)
        self.shown.append(visible)
        return visible

    def finish(self) -> tuple[str, ParsedResponse]:
        tail = "" if self.complete else self._finish()
        # A dialect that finds its calls only at the end (Llama 3's "a; b") may find more than it may make.
        if self.max_calls is not None:
            del self.calls[self.max_calls :]
        self.shown.append(tail)
        return tail, ParsedResponse(content="".join(self.shown).strip(), tool_calls=self.calls)

    def take_fragments(self) -> list[CallFragment]:
        """The pieces of calls written since the last time asked. A dialect's calls can only be judged whole (tags
        and JSON may be cut anywhere, and text that looks like a call may not be one), so by default each call
        comes whole, name then arguments, as soon as it is complete."""
        fragments: list[CallFragment] = []
        while self._announced < len(self.calls):
            fragments += CallFragment.whole(self._announced, self.calls[self._announced])
            self._announced += 1
        return fragments

    @abstractmethod
    def _feed(self, chunk: str) -> str: ...

    @abstractmethod
    def _finish(self) -> str: ...


class ForcedCallParser(StreamParser):
    """Reads a reply whose shape a grammar forced to be one of `calls`: all of it is that call, so it is parsed by
    that exact shape (prefix, JSON arguments or a free-text body, suffix), not by looking for tags, which could
    also occur inside an argument. Because the shape is certain, the call streams as it is written: its name once
    its prefix is complete, then its arguments text (a free-text body as a JSON string, escaped piece by piece)."""

    def __init__(self, calls: Sequence[ConstrainedCall]) -> None:
        super().__init__([call.name for call in calls])
        self._calls = list(calls)
        self._parts: list[str] = []  # the reply, joined at the end (`str +=` would copy it on every chunk)
        self._head = ""  # its start, as far as the longest prefix: all that choosing the call reads
        self._head_size = max((len(call.prefix) for call in self._calls), default=0)
        self._chosen: ConstrainedCall | None = None
        self._id = new_call_id()
        self._streamed = 0  # characters of the body already sent as argument text
        self._unsent: list[str] = []  # the body after those, `_unsent_size` characters
        self._unsent_size = 0
        self._unsure = 0  # characters at the end of the body that may still belong to the end of the call
        self._fragments: list[CallFragment] = []

    def _feed(self, chunk: str) -> str:
        self._parts.append(chunk)
        if self._chosen is not None:
            self._add_body(chunk)
            return ""
        if len(self._head) < self._head_size:
            self._head += chunk[: self._head_size - len(self._head)]
        self._choose()
        if self._chosen is not None:
            self._add_body("".join(self._parts)[len(self._chosen.prefix) :])
        return ""

    def _choose(self) -> None:
        """The call is known once exactly one prefix is complete and no other can still be."""
        complete = [call for call in self._calls if self._head.startswith(call.prefix)]
        possible = [call for call in self._calls if call.prefix.startswith(self._head[: len(call.prefix)])]
        if len(complete) == 1 and len(possible) == 1:
            self._chosen = complete[0]
            self._fragments.append(CallFragment(0, id=self._id, name=self._chosen.name))
            if self._chosen.body_argument is not None:
                self._fragments.append(CallFragment(0, "{" + json.dumps(self._chosen.body_argument) + ': "'))

    def _add_body(self, piece: str) -> None:
        """Stream what can no longer be the end of the call: for a body its trailing newlines and fence, for JSON
        the suffix after trailing whitespace. Only `piece` is read, so streaming stays linear in the reply."""
        assert self._chosen is not None
        if not piece:
            return
        self._unsent.append(piece)
        self._unsent_size += len(piece)
        kept = len(piece.rstrip(" \t\r\n`" if self._chosen.body_argument is not None else None))
        self._unsure = self._unsure + len(piece) if kept == 0 else len(piece) - kept
        held = self._unsure + (len(self._chosen.suffix) if self._chosen.body_argument is None else 0)
        if self._unsent_size > held:
            unsent = "".join(self._unsent)
            self._unsent = [unsent[len(unsent) - held :]] if held else []
            self._unsent_size = held
            self._send(unsent[: len(unsent) - held])

    def _send(self, piece: str) -> None:
        self._streamed += len(piece)
        if self._chosen is not None and self._chosen.body_argument is not None:
            piece = json.dumps(piece, ensure_ascii=False)[1:-1]  # JSON escapes character by character
        self._fragments.append(CallFragment(0, piece))

    def _stream_to(self, body: str, end: int) -> None:
        if end > self._streamed:
            self._send(body[self._streamed : end])

    def take_fragments(self) -> list[CallFragment]:
        fragments, self._fragments = self._fragments, []
        return fragments

    def _finish(self) -> str:
        text = "".join(self._parts).rstrip()
        for call in self._calls:
            if not text.startswith(call.prefix) or not text.endswith(call.suffix):
                continue
            middle = text[len(call.prefix) : len(text) - len(call.suffix)]
            if call.body_argument is not None:
                code = middle.rstrip("\n")
                self._stream_to(code, len(code))
                self._fragments.append(CallFragment(0, '"}'))
                self.calls.append(ToolCall(name=call.name, arguments={call.body_argument: code}, id=self._id))
                return ""
            try:
                arguments = loads_bounded(middle)
            except ValueError:  # bad JSON, or JSON over a limit
                continue
            if isinstance(arguments, dict):
                self._stream_to(middle, len(middle))
                self.calls.append(ToolCall(name=call.name, arguments=arguments, id=self._id))
                return ""
        # Cut short (max new tokens, Stop): no call. What was written of it goes out as fragments, not as text.
        if self._chosen is not None:
            body = "".join(self._parts)[len(self._chosen.prefix) :]
            self._stream_to(body, len(body))
        return ""


class Dialect(ABC):
    name: ClassVar[str]  # defining it registers the class (a shared intermediate base defines none)
    label: ClassVar[str]
    # Detection tries higher first: a template may also contain a more generic marker of another family.
    detection_priority: ClassVar[int] = 0
    stop_strings: tuple[str, ...] = ()  # end a reply after a call (e.g. GLM-4's <|observation|>)

    @classmethod
    def detects(cls, chat_template: str) -> bool:
        """Whether `chat_template` contains a marker only this family's templates have (none by default: such a
        dialect is chosen by name only)."""
        return False

    @abstractmethod
    def stream_parser(self, tool_names: Sequence[str]) -> StreamParser: ...

    @abstractmethod
    def json_call(self, tool: dict[str, Any]) -> ConstrainedCall:
        """The exact text of a call to `tool` (an OpenAI function schema), as prefix + JSON arguments + suffix."""

    def constrained_call(self, tool: dict[str, Any], allow_code_body: bool = True) -> ConstrainedCall:
        """How a forced call to `tool` is written: a code tool as a fenced block when it is the only allowed call
        (`code_call`), anything else as this dialect's JSON call."""
        if allow_code_body and code_argument(tool):
            return code_call(tool, self.code_call_lead(tool["function"]["name"]))
        return self.json_call(tool)

    def code_call_lead(self, name: str) -> str:
        """What precedes a fenced code call in this dialect (GLM-4 names the tool on the line before)."""
        return ""


    @abstractmethod
    def format_instructions(self) -> str:
        """How to call a tool, for the fallback system prompt of templates that know no tools."""

    def parse(self, text: str, tool_names: Sequence[str]) -> ParsedResponse:
        parser = self.stream_parser(tool_names)
        parser.feed(text)
        return parser.finish()[1]

    def render(
        self,
        messages: Sequence[ChatMessage],
        tools: list[dict[str, Any]] | None,
        native: bool,
        tool_role: bool = True,
    ) -> RenderedPrompt:
        """Prompt messages for this dialect. `native`: the chat template renders tools itself; `tool_role`: it
        accepts a message in the `tool` role (used by the fallback; otherwise results go in a user message)."""
        normalised = [_with_dict_arguments(message) for message in messages]
        if not tools and not any(m.get("tool_calls") or m.get("role") == "tool" for m in normalised):
            return RenderedPrompt(normalised, None)
        if native:
            return self.render_native(normalised, tools or None)
        return self.render_fallback(normalised, tools or [], tool_role)

    def render_native(self, messages: list[TemplateMessage], tools: list[dict[str, Any]] | None) -> RenderedPrompt:
        return RenderedPrompt(messages, tools)

    def render_fallback(
        self, messages: list[TemplateMessage], tools: list[dict[str, Any]], tool_role: bool = True
    ) -> RenderedPrompt:
        """For templates that render no tools: describe the tools in the system prompt, leave past calls out and
        keep results in the tool role (generic templates such as SmolLM2's ChatML render any role; small models
        answered from a `tool` turn far better than from a user turn that quotes the result)."""
        out: list[TemplateMessage] = []
        has_system = bool(messages) and messages[0].get("role") == "system"
        system = (messages[0].get("content") or "") if has_system else ""
        rest = messages[1:] if has_system else messages
        if tools:
            listing = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
            # The template's own default system prompt is lost once the tools take the system turn: say who the
            # model is first (without it SmolLM2 looped writing functions for a forced `python` call on a CSV).
            system = (system or FALLBACK_TOOLS_INTRO) + "\n\n" + (
                "You can call these tools:\n" + listing + "\n\n" + self.format_instructions()
            )
        if system:
            out.append({"role": "system", "content": system})
        for message in rest:
            if message.get("role") == "assistant" and message.get("tool_calls"):
                # Past calls are left out: a model that was never trained on tools copies any call it sees
                # (SmolLM2 repeated the call instead of answering); the results below are what it needs.
                if (message.get("content") or "").strip():
                    out.append({"role": "assistant", "content": message["content"]})
            elif message.get("role") == "tool" and tool_role:
                out.append({"role": "tool", "content": message.get("content") or ""})
            elif message.get("role") == "tool":
                out.append({"role": "user", "content": f"Result of {message.get('name') or 'the tool'}: "
                                                       f"{message.get('content') or ''}"})
            else:
                out.append(message)
        return RenderedPrompt(out, None)




def _with_dict_arguments(message: ChatMessage) -> TemplateMessage:
    """Chat templates expect call arguments as a mapping (they `tojson` it); OpenAI messages carry a string."""
    if not message.get("tool_calls"):
        return {**message}
    rendered: TemplateMessage = copy.deepcopy({**message})
    for call in rendered["tool_calls"]:
        function = call.get("function") or {}
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = loads_bounded(function["arguments"] or "{}")
            except ValueError:  # bad JSON, or JSON over a limit
                function["arguments"] = {}
    return rendered


def call_from_json(data: Any, tool_names: Sequence[str], require_known: bool,
                   arguments_keys: Sequence[str]) -> ToolCall | None:
    """A ToolCall from a decoded {"name": ..., "<arguments key>": {...}} object, or None if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
        return None
    name = data["name"].strip()
    if require_known and name not in tool_names:
        return None
    arguments: Any = {}
    for key in arguments_keys:
        if key in data:
            arguments = data[key]
            break
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = loads_bounded(arguments)
        except ValueError:  # bad JSON, or JSON over a limit
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    extra = set(data) - {"name", *arguments_keys}
    if extra:
        return None
    return ToolCall(name=name, arguments=arguments)
