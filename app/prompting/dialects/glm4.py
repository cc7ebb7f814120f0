"""GLM-4: a call is the tool's name on the first line of the reply and its JSON arguments below, ended by the
<|observation|> token; results come back in the `observation` role."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from typing import Any

from app.domain.chat_messages import TemplateMessage
from app.domain.conversation import ToolCall
from app.limits.json_limits import loads_bounded
from app.prompting.code_blocks import strip_code_fence
from app.prompting.dialects.dialect import ConstrainedCall, Dialect, RenderedPrompt, StreamParser

OBSERVATION = "<|observation|>"


def _python_body(body: str) -> tuple[str, dict[str, Any]] | None:
    code = strip_code_fence(body.strip())
    return ("python", {"code": code}) if code.strip() else None


# A browser call is a query, a URL or a list of ids: a few hundred characters. Python's parser and literal_eval
# recurse on nesting such as 50,000 minus signs (MemoryError, RecursionError), so longer bodies are not parsed.
MAX_BROWSER_CALL = 4096


def _browser_body(body: str) -> tuple[str, dict[str, Any]] | None:
    """GLM-4's simple_browser writes a Python-style call: search("q", recency_days=3), open_url("u"), mclick([1])."""
    if len(body) > MAX_BROWSER_CALL:
        return None
    try:
        node = ast.parse(body.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            return None
        args = [ast.literal_eval(arg) for arg in node.args]
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    # ValueError: not a literal; TypeError: e.g. {[1]: 2}; the last two: deep nesting that the cap still lets in.
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    name = node.func.id
    if name == "search" and len(args) == 1:
        return "web_search", {"query": args[0], **{k: v for k, v in kwargs.items() if k == "recency_days"}}
    if name == "open_url" and len(args) == 1:
        return "open_url", {"url": args[0]}
    if name == "mclick" and len(args) == 1:
        return "mclick", {"ids": args[0]}
    return None


def _cogview_body(body: str) -> tuple[str, dict[str, Any]] | None:
    return ("generate_image", {"prompt": body.strip()}) if body.strip() else None


# GLM-4's built-in tools write their call body in their own syntax; each maps onto one of our tools.
BUILTINS: dict[str, tuple[tuple[str, ...], Callable[[str], tuple[str, dict[str, Any]] | None]]] = {
    "python": (("python",), _python_body),
    "simple_browser": (("web_search", "open_url", "mclick"), _browser_body),
    "cogview": (("generate_image",), _cogview_body),
}


class GLM4Parser(StreamParser):
    """Holds back the start of the reply while it could still be a known tool's name; only a first line that
    is exactly a known tool name followed by a JSON object is a call (prose is never taken for a call)."""

    def __init__(self, tool_names: Sequence[str]) -> None:
        super().__init__(tool_names)
        self._held: list[str] = []  # a list, joined once at the end: `str +=` would copy the reply on every chunk
        self._head = ""  # the held text from its first non-space character (see `_feed` for why it stays short)
        self._mode = "undecided"  # then "text" or "call"
        builtins = [name for name, (targets, _) in BUILTINS.items() if set(targets) & set(tool_names)]
        self._names = (*tool_names, *builtins)  # what may stand on the first line of a call

    def _feed(self, chunk: str) -> str:
        if self._mode == "text":
            return chunk
        self._held.append(chunk)
        if self._mode == "call":
            return ""
        self._head = self._head + chunk if self._head else chunk.lstrip()
        if not self._head:
            return ""
        first_line, newline, _ = self._head.partition("\n")
        name = first_line.strip()  # as `_finish` reads it
        if newline and name in self._names:
            self._mode = "call"
            return ""
        if not newline and any(known.startswith(name) for known in self._names):
            # May still become a tool name. Spaces after it count for nothing, so they are not kept in the head,
            # which stays shorter than the longest name plus one chunk.
            self._head = name + " " if name != first_line else first_line
            return ""
        self._mode = "text"
        held, self._held = "".join(self._held), []
        return held

    def _finish(self) -> str:
        held, self._held = "".join(self._held), []
        head = held.lstrip()
        name, _, body = head.partition("\n")
        name = name.strip()
        if name not in self._names:
            return held
        try:
            arguments = loads_bounded(body.strip() or "{}")
        except ValueError:  # bad JSON, or JSON over a limit
            arguments = None
        if isinstance(arguments, dict) and name in self.tool_names:
            self.calls.append(ToolCall(name=name, arguments=arguments))
            return ""
        if name in BUILTINS:
            targets, parse_body = BUILTINS[name]
            call = parse_body(body)
            if call is not None and call[0] in self.tool_names and call[0] in targets:
                self.calls.append(ToolCall(name=call[0], arguments=call[1]))
                return ""
        return held


class GLM4Dialect(Dialect):
    name = "glm4"
    label = "GLM-4 (name + JSON, observation role)"
    detection_priority = 1  # before Llama 3.1, whose test is looser
    stop_strings = (OBSERVATION,)

    @classmethod
    def detects(cls, chat_template: str) -> bool:
        return OBSERVATION in chat_template

    def stream_parser(self, tool_names: Sequence[str]) -> StreamParser:
        return GLM4Parser(tool_names)

    def json_call(self, tool: dict[str, Any]) -> ConstrainedCall:
        name = tool["function"]["name"]
        return ConstrainedCall(name, f"{name}\n", tool["function"]["parameters"], "")

    def code_call_lead(self, name: str) -> str:
        return f"{name}\n"


    def format_instructions(self) -> str:
        return (
            "To call a tool, reply with only the tool's name on the first line and its arguments as a JSON object "
            'on the next line, for example:\ntool_name\n{"parameter": "value"}\n'
            "The result comes back as an observation; then answer the user with it. "
            "If no tool is needed, answer directly."
        )

    def render_native(self, messages: list[TemplateMessage], tools: list[dict[str, Any]] | None) -> RenderedPrompt:
        """GLM-4's template: tools on the system message (and as `tools=` for the -hf templates), a call as an
        assistant message whose metadata is the tool name and content the JSON, results in the observation role."""
        out: list[TemplateMessage] = []
        for message in messages:
            role = message.get("role")
            if role == "assistant" and message.get("tool_calls"):
                if message.get("content"):
                    out.append({"role": "assistant", "metadata": "", "content": message["content"]})
                for call in message["tool_calls"]:
                    function = call["function"]
                    out.append({"role": "assistant", "metadata": function["name"],
                                "content": json.dumps(function["arguments"], ensure_ascii=False)})
            elif role == "tool":
                out.append({"role": "observation", "metadata": "", "content": message.get("content") or ""})
            else:
                out.append({**message, "metadata": message.get("metadata", "")})
        if tools:
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "tools": tools}
            else:
                out.insert(0, {"role": "system", "metadata": "", "content": "", "tools": tools})
        return RenderedPrompt(out, tools)
