"""Hermes / Qwen: calls are JSON objects between <tool_call> tags, one or several per reply, text around them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from app.limits.json_limits import MAX_DEPTH, loads_bounded
from app.prompting.dialects.dialect import ConstrainedCall, Dialect, StreamParser, call_from_json
from app.prompting.partial_match import partial_marker_length

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_OPEN, _CLOSE = OPEN.encode(), CLOSE.encode()
# The reply is kept as UTF-8 in a bytearray, which grows in amortised constant time (`str +=` on an attribute
# copies the whole string). The tags and JSON's structure are ASCII, and no byte of a multi-byte UTF-8 character
# is, so searching the bytes finds exactly what searching the text would, and cuts fall between characters.
_ENCODING, _ERRORS = "utf-8", "surrogatepass"

_NON_SPACE = re.compile(rb"[^ \t\r\n]")  # JSON's whitespace
_STRUCTURE = re.compile(rb'["\[\]{}]')
_STRING_END = re.compile(rb'["\\]')


class _ObjectEnd:
    """Where the JSON object that starts at `start` (after whitespace) ends, found from text that arrives piece by
    piece, without decoding it. Strings and bracket depth are all it tracks: for valid JSON that places the end
    exactly, and for invalid JSON json.loads fails wherever the end is. It gives up (`failed`) on what is not an
    object or nests deeper than json_limits allows, since such a body can never become a call."""

    def __init__(self, start: int) -> None:
        self.pos = start  # everything before it is read
        self.end: int | None = None  # just after the closing brace, once read
        self.failed = False
        self._depth = 0
        self._in_string = False

    def advance(self, buf: bytearray, limit: int) -> None:
        """Read on up to `limit` (stopping early at a backslash whose escaped character has not arrived)."""
        while self.pos < limit and self.end is None and not self.failed:
            if self._in_string:
                if not self._string(buf, limit):
                    return
            elif self._depth == 0:
                self._lead(buf, limit)
            else:
                self._structure(buf, limit)

    def _lead(self, buf: bytearray, limit: int) -> None:
        found = _NON_SPACE.search(buf, self.pos, limit)
        if found is None:
            self.pos = limit
        elif buf[found.start()] == ord("{"):
            self._depth, self.pos = 1, found.end()
        else:
            self.failed = True

    def _structure(self, buf: bytearray, limit: int) -> None:
        found = _STRUCTURE.search(buf, self.pos, limit)
        if found is None:
            self.pos = limit
            return
        self.pos = found.end()
        char = buf[found.start()]
        if char == ord('"'):
            self._in_string = True
        elif char in b"[{":
            self._depth += 1
            self.failed = self._depth > MAX_DEPTH
        else:
            self._depth -= 1
            if self._depth == 0:
                self.end = self.pos

    def _string(self, buf: bytearray, limit: int) -> bool:
        found = _STRING_END.search(buf, self.pos, limit)
        if found is None:
            self.pos = limit
        elif buf[found.start()] == ord('"'):
            self._in_string, self.pos = False, found.end()
        elif found.end() < limit:
            self.pos = found.end() + 1  # an escape: the backslash and the character after it
        else:
            self.pos = found.start()  # read the backslash again once its character is here
            return False
        return True


class _Block:
    """A <tool_call> block at `start` in the reply, read as the reply grows, every search resuming where it stopped.

    It is a call if the JSON object in it is followed (after whitespace) by a closing tag and is a valid call; a
    closing tag that is not that one may sit inside a JSON string, so only another <tool_call> opening after the
    first closing tag (before any valid call) makes the block text, up to that first closing tag. Whichever of the
    two comes first in the reply decides, so the outcome does not depend on how the reply was chunked."""

    def __init__(self, start: int, take: Callable[[str], bool]) -> None:
        self.body = start + len(_OPEN)
        self._take = take  # takes the call if a body is a valid one
        self._object = _ObjectEnd(self.body)
        self._first_close: int | None = None
        self._close_from = self.body  # where the search for the first closing tag resumes
        self._open_from = 0  # where the search for a <tool_call> after it resumes
        self._space_from = 0  # where the whitespace after the object is read on from
        self._dead = False  # no closing tag can end a valid call any more

    def advance(self, buf: bytearray) -> tuple[int, bool] | None:
        """Where the block ends and whether it was a call (then taken), or None while the reply has not said."""
        opened = self._next_open(buf)
        limit = len(buf) if opened is None else opened + len(_OPEN)  # nothing past the deciding <tool_call>
        close = self._call_close(buf, limit)
        if close is not None:
            return close + len(_CLOSE), True
        if opened is not None:
            assert self._first_close is not None
            return self._first_close + len(_CLOSE), False
        return None

    def _next_open(self, buf: bytearray) -> int | None:
        if self._first_close is None:
            at = buf.find(_CLOSE, self._close_from)
            if at < 0:
                self._close_from = max(self.body, len(buf) - len(_CLOSE) + 1)
                return None
            self._first_close, self._open_from = at, at + len(_CLOSE)
        at = buf.find(_OPEN, self._open_from)
        if at < 0:
            self._open_from = max(self._open_from, len(buf) - len(_OPEN) + 1)
            return None
        return at

    def _call_close(self, buf: bytearray, limit: int) -> int | None:
        """The closing tag right after the JSON object, if it is complete before `limit` and the body is a call."""
        if self._dead:
            return None
        self._object.advance(buf, limit)
        if self._object.failed:
            self._dead = True
        if self._object.end is None or self._dead:
            return None
        self._space_from = max(self._space_from, self._object.end)
        found = _NON_SPACE.search(buf, self._space_from, limit)
        if found is None:
            self._space_from = limit
            return None
        at = self._space_from = found.start()
        if at + len(_CLOSE) > limit:
            return None  # not all here yet (`at` stays within the last few bytes, so this is cheap)
        self._dead = True  # decided now, either way
        if buf[at : at + len(_CLOSE)] != _CLOSE or not self._take(buf[self.body : at].decode(_ENCODING, _ERRORS)):
            return None
        return at


class HermesParser(StreamParser):
    """Linear in the length of the reply however it is chunked: the reply is kept whole and every scan resumes
    from where the previous one stopped."""

    def __init__(self, tool_names: Sequence[str]) -> None:
        super().__init__(tool_names)
        self._buf = bytearray()  # the reply so far, UTF-8
        self._start = 0  # where the undecided text begins: everything before it is shown or taken
        self._block: _Block | None = None  # the <tool_call> block open at `_start`

    def _feed(self, chunk: str) -> str:
        self._buf += chunk.encode(_ENCODING, _ERRORS)
        shown: list[str] = []
        while True:
            if self._block is None:
                at = self._buf.find(_OPEN, self._start)  # from `_start`: only a held partial tag is read again
                if at < 0:
                    tail = bytes(self._buf[max(self._start, len(self._buf) - len(_OPEN) + 1) :])
                    end = len(self._buf) - partial_marker_length(tail, (_OPEN,))
                    shown.append(self._text(self._start, end))
                    self._start = end
                    return "".join(shown)
                shown.append(self._text(self._start, at))
                self._start = at
                self._block = _Block(at, self._take)
            ending = self._block.advance(self._buf)
            if ending is None:
                return "".join(shown)  # no complete call yet: wait (a "</tool_call>" may sit inside a string)
            end, valid = ending
            if not valid:
                shown.append(self._text(self._start, end))  # not a call after all: it is text
            self._start, self._block = end, None
            if self.complete:  # the last call allowed: the reply ends here, whatever else this chunk holds
                self._start = len(self._buf)
                return "".join(shown)

    def _finish(self) -> str:
        pending = self._text(self._start, len(self._buf))
        self._start = len(self._buf)
        if self._block is not None and self._take(pending[len(OPEN) :]):
            return ""  # a complete call whose closing tag was cut by a stop string
        return pending  # text, or a block that never became a valid call: shown as it is

    def _text(self, start: int, end: int) -> str:
        return self._buf[start:end].decode(_ENCODING, _ERRORS)

    def _take(self, body: str) -> bool:
        try:
            data = loads_bounded(body)
        except ValueError:  # bad JSON, or JSON over a limit
            return False
        call = call_from_json(data, self.tool_names, require_known=False, arguments_keys=("arguments", "parameters"))
        if call is None:
            return False
        self.calls.append(call)
        return True


class HermesDialect(Dialect):
    name = "hermes"
    label = "Hermes / Qwen (<tool_call> tags)"
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
