"""Hermes / Qwen: calls are JSON objects between <tool_call> tags, one or several per reply, text around them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.dialects.base import ConstrainedCall, Dialect, StreamParser, call_from_json
from app.partial_match import partial_marker_length

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesParser(StreamParser):
    def __init__(self, tool_names: Sequence[str]) -> None:
        super().__init__(tool_names)
        self._pending = ""  # text not yet shown
        self._inside = False  # within an open <tool_call> block

    def _feed(self, chunk: str) -> str:
        self._pending += chunk
        shown: list[str] = []
        while True:
            if not self._inside:
                at = self._pending.find(OPEN)
                if at < 0:
                    keep = partial_marker_length(self._pending, (OPEN,))
                    shown.append(self._pending[: len(self._pending) - keep])
                    self._pending = self._pending[len(self._pending) - keep :]
                    return "".join(shown)
                shown.append(self._pending[:at])
                self._pending = self._pending[at:]
                self._inside = True
            block = self._block_end()
            if block is None:
                return "".join(shown)  # no complete call yet: wait (a "</tool_call>" may sit inside a string)
            end, valid = block
            if not valid:
                shown.append(self._pending[:end])  # not a call after all: it is text
            self._pending = self._pending[end:]
            self._inside = False

    def _block_end(self) -> tuple[int, bool] | None:
        """Where the open block ends and whether it was a valid call (then taken), or None while undecided.

        A closing tag whose block is not valid JSON may sit inside a JSON string, so later closing tags are tried
        too; once another <tool_call> opens after it, the block is over and was text."""
        start = len(OPEN)
        while (end := self._pending.find(CLOSE, start)) >= 0:
            if self._take(self._pending[len(OPEN) : end]):
                return end + len(CLOSE), True
            if self._pending.find(OPEN, end) >= 0:
                return end + len(CLOSE), False
            start = end + 1
        return None

    def _finish(self) -> str:
        pending, self._pending = self._pending, ""
        if self._inside and self._take(pending[len(OPEN) :]):
            return ""  # a complete call whose closing tag was cut by a stop string
        return pending  # text, or a block that never became a valid call: shown as it is

    def _take(self, body: str) -> bool:
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            return False
        call = call_from_json(data, self.tool_names, require_known=False, arguments_keys=("arguments", "parameters"))
        if call is None:
            return False
        self.calls.append(call)
        return True


class HermesDialect(Dialect):
    name = "hermes"
    label = "Hermes / Qwen (<tool_call> tags)"
    order = 0
    detection_priority = -1  # tried last: GLM-4.5's template writes <tool_call> too, next to <|observation|>

    @classmethod
    def detects(cls, chat_template: str) -> bool:
        return OPEN in chat_template

    def stream_parser(self, tool_names: Sequence[str]) -> StreamParser:
        return HermesParser(tool_names)

    def json_call(self, tool: dict[str, Any]) -> ConstrainedCall:
        function = tool["function"]
        prefix = f'{OPEN}\n{{"name": {json.dumps(function["name"], ensure_ascii=False)}, "arguments": '
        return ConstrainedCall(function["name"], prefix, function["parameters"], f"}}\n{CLOSE}")


    def format_instructions(self) -> str:
        return (
            "To call a tool, reply with a JSON object inside <tool_call></tool_call> tags, for example:\n"
            '<tool_call>\n{"name": "tool_name", "arguments": {"parameter": "value"}}\n</tool_call>\n'
            "The result comes back inside <tool_response></tool_response> tags; then answer the user with it. "
            "If no tool is needed, answer directly."
        )
