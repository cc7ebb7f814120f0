"""GLM-4: a call is the tool's name on the first line of the reply and its JSON arguments below, ended by the
<|observation|> token; results come back in the `observation` role."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.conversation import ToolCall
from app.dialects.base import ConstrainedCall, Dialect, RenderedPrompt, StreamParser

OBSERVATION = "<|observation|>"


class GLM4Parser(StreamParser):
    """Holds back the start of the reply while it could still be a known tool's name; only a first line that
    is exactly a known tool name followed by a JSON object is a call (prose is never taken for a call)."""

    def __init__(self, tool_names: Sequence[str]) -> None:
        super().__init__(tool_names)
        self._held = ""
        self._mode = "undecided"  # then "text" or "call"

    def _feed(self, chunk: str) -> str:
        if self._mode == "text":
            return chunk
        self._held += chunk
        if self._mode == "call":
            return ""
        head = self._held.lstrip()
        if not head:
            return ""
        first_line, newline, _ = head.partition("\n")
        if newline and first_line.strip() in self.tool_names:
            self._mode = "call"
            return ""
        if not newline and any(name.startswith(first_line) for name in self.tool_names):
            return ""  # may still become a tool name
        self._mode = "text"
        held, self._held = self._held, ""
        return held

    def _finish(self) -> str:
        held, self._held = self._held, ""
        head = held.lstrip()
        name, _, body = head.partition("\n")
        if name.strip() in self.tool_names:
            try:
                arguments = json.loads(body.strip() or "{}")
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict):
                self.calls.append(ToolCall(name=name.strip(), arguments=arguments))
                return ""
        return held


class GLM4Dialect(Dialect):
    name = "glm4"
    label = "GLM-4 (name + JSON, observation role)"
    stop_strings = (OBSERVATION,)

    def stream_parser(self, tool_names: Sequence[str]) -> StreamParser:
        return GLM4Parser(tool_names)

    def constrained_call(self, tool: dict[str, Any]) -> ConstrainedCall:
        name = tool["function"]["name"]
        return ConstrainedCall(name, f"{name}\n", tool["function"]["parameters"], "")

    def call_text(self, call: ToolCall) -> str:
        return f"{call.name}\n{json.dumps(call.arguments, ensure_ascii=False)}"

    def format_instructions(self) -> str:
        return (
            "To call a tool, reply with only the tool's name on the first line and its arguments as a JSON object "
            'on the next line, for example:\ntool_name\n{"parameter": "value"}\n'
            "The result comes back as an observation; then answer the user with it. "
            "If no tool is needed, answer directly."
        )

    def render_native(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> RenderedPrompt:
        """GLM-4's template: tools on the system message (and as `tools=` for the -hf templates), a call as an
        assistant message whose metadata is the tool name and content the JSON, results in the observation role."""
        out: list[dict[str, Any]] = []
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
