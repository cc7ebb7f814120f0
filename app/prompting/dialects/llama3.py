"""Llama 3.1 JSON tool calling: the whole reply is {"name": ..., "parameters": {...}}, optionally after
<|python_tag|>; several calls may be separated by ";". Anything else (prose, a JSON code block) is text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.domain.chat_messages import TemplateMessage
from app.domain.conversation import ToolCall
from app.limits.json_limits import loads_sequence
from app.prompting.dialects.dialect import ConstrainedCall, Dialect, RenderedPrompt, StreamParser, call_from_json

PYTHON_TAG = "<|python_tag|>"


class Llama3Parser(StreamParser):
    def __init__(self, tool_names: Sequence[str]) -> None:
        super().__init__(tool_names)
        self._held: list[str] = []  # a list, joined once at the end: `str +=` would copy the reply on every chunk
        self._head = ""  # the held text from its first non-space character: short while undecided
        self._mode = "undecided"  # then "text" or "maybe_call" (held to the end)

    def _feed(self, chunk: str) -> str:
        if self._mode == "text":
            return chunk
        self._held.append(chunk)
        if self._mode == "maybe_call":
            return ""
        self._head = self._head + chunk if self._head else chunk.lstrip()
        if not self._head:
            return ""
        if self._head.startswith(PYTHON_TAG) or self._head.startswith("{"):
            self._mode = "maybe_call"
            return ""
        if PYTHON_TAG.startswith(self._head):
            return ""
        self._mode = "text"
        held, self._held = "".join(self._held), []
        return held

    def _finish(self) -> str:
        held, self._held = "".join(self._held), []
        if self._mode != "maybe_call":
            return held
        calls = self._parse_calls(held.strip().removeprefix(PYTHON_TAG))
        if calls is None:
            return held
        self.calls.extend(calls)
        return ""

    def _parse_calls(self, text: str) -> list[ToolCall] | None:
        """The calls `text` consists of (JSON objects separated by ";"), or None if anything in it is not a call."""
        try:
            values = loads_sequence(text, separators=";")
        except ValueError:  # bad JSON, or JSON over a limit
            return None
        calls = [call_from_json(data, self.tool_names, require_known=True, arguments_keys=("parameters", "arguments"))
                 for data in values]
        if not calls or None in calls:
            return None
        return [call for call in calls if call is not None]


class Llama3JsonDialect(Dialect):
    name = "llama3_json"
    label = "Llama 3.1 JSON ({name, parameters})"
    stop_strings = ("<|eom_id|>",)  # ends a <|python_tag|> call turn

    @classmethod
    def detects(cls, chat_template: str) -> bool:
        # Not every Llama 3 template writes <|python_tag|>; one that describes the JSON call says "parameters".
        return PYTHON_TAG in chat_template or ("<|start_header_id|>" in chat_template and "parameters" in chat_template)

    def stream_parser(self, tool_names: Sequence[str]) -> StreamParser:
        return Llama3Parser(tool_names)

    def json_call(self, tool: dict[str, Any]) -> ConstrainedCall:
        name = tool["function"]["name"]
        prefix = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "parameters": '
        return ConstrainedCall(name, prefix, tool["function"]["parameters"], "}")


    def format_instructions(self) -> str:
        return (
            "To call a tool, reply with only a JSON object of the form "
            '{"name": "tool_name", "parameters": {"parameter": "value"}} and nothing else. '
            "The result comes back in the next message; then answer the user with it. "
            "If no tool is needed, answer directly."
        )

    def render_native(self, messages: list[TemplateMessage], tools: list[dict[str, Any]] | None) -> RenderedPrompt:
        # Llama 3.1's template renders one call per assistant message: split parallel calls.
        out: list[TemplateMessage] = []
        for message in messages:
            calls = message.get("tool_calls") or []
            if message.get("role") == "assistant" and len(calls) > 1:
                out.extend({"role": "assistant", "content": "", "tool_calls": [call]} for call in calls)
            else:
                out.append(message)
        return RenderedPrompt(out, tools)
