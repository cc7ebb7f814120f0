"""The two ends every client shares: conversation -> prompt messages (`process_input`) and model output ->
visible text and tool calls (`process_response`, whose `ResponseProcessor` the shared streaming helper in
app/clients/streaming.py feeds for every backend), plus fitting a prompt into the context window.

Tool-call dialects (app/dialects/) decide how tools, past calls and results are rendered for a model family and
how its replies are parsed; the local clients apply them when they turn these messages into a prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.clients.stop_strings import StopStringFilter
from app.conversation import CallFragment, Conversation, Message, PartialCalls, ToolCall
from app.dialects import ConstrainedCall, Dialect, ParsedResponse, StreamParser
from app.dialects.base import ForcedCallParser
from app.json_limits import JSONLimitError, loads_bounded


def process_input(conversation: Conversation, system_prompt: str = "") -> list[dict[str, Any]]:
    """OpenAI-format messages to prompt with: the system prompt first, failed or empty answers left out."""
    messages: list[dict[str, Any]] = []
    if system_prompt.strip():
        messages.append({"role": "system", "content": system_prompt.strip()})
    for message in conversation.messages:
        if _belongs_in_prompt(message):
            messages.append(message.to_openai())
    return messages


def _belongs_in_prompt(message: Message) -> bool:
    if message.role != "assistant":
        return True
    # An answer that failed, or was stopped before it said anything, is shown to the user but not fed back.
    return message.error is None and bool(message.content.strip() or message.tool_calls)


@dataclass
class ReplyPiece:
    """What a chunk of model output adds to the reply: text to show and pieces of tool calls."""

    text: str = ""
    call_fragments: list[CallFragment] = field(default_factory=list)


class ResponseProcessor:
    """Model output -> visible text and tool calls, chunk by chunk, the same for every backend.

    Stop strings are cut first (never showing part of one), then the reply is split: by the dialect's parser on a
    local backend (`parser`), or from the call deltas an OpenAI-compatible server sends (`native_tools`). Calls
    stream as `CallFragment`s (name first, then argument text) and come whole from `finish`.
    """

    def __init__(self, stop_strings: Sequence[str] = (), parser: StreamParser | None = None,
                 native_tools: Sequence[dict[str, Any]] | None = None) -> None:
        self._stops = StopStringFilter(stop_strings)
        self._parser = parser
        self._native = NativeCalls(native_tools) if native_tools is not None else None
        self._shown: list[str] = []  # the text shown so far, when no parser keeps it

    @property
    def stopped(self) -> bool:
        """A stop string ended the reply: the engine should stop too."""
        return self._stops.stopped

    def feed(self, text: str, native_fragments: Sequence[CallFragment] = ()) -> ReplyPiece:
        visible = self._stops.feed(text) if text else ""
        return self._split(visible, native_fragments)

    def finish(self) -> tuple[ReplyPiece, ParsedResponse, str | None]:
        """The rest of the reply, the whole parse (content and calls) and a notice about calls that were unusable."""
        piece = self._split(self._stops.flush(), ())
        if self._parser is not None:
            tail, parsed = self._parser.finish()
            piece.text += tail
            piece.call_fragments.extend(self._parser.take_fragments())
            return piece, parsed, None
        content = "".join(self._shown).strip()
        if self._native is not None:
            calls, notice = self._native.decode()
            return piece, ParsedResponse(content, calls), notice
        return piece, ParsedResponse(content), None

    def _split(self, visible: str, native_fragments: Sequence[CallFragment]) -> ReplyPiece:
        if self._parser is not None:
            text = self._parser.feed(visible) if visible else ""
            return ReplyPiece(text, self._parser.take_fragments())
        self._shown.append(visible)
        if self._native is not None:
            self._native.add(native_fragments)
        return ReplyPiece(visible, list(native_fragments))


def process_response(dialect: Dialect | None, tools: Sequence[dict[str, Any]], forced: Sequence[ConstrainedCall] = (),
                     stop_strings: Sequence[str] = ()) -> ResponseProcessor:
    """The processor for one reply of a local backend: the dialect's parser for `tools`, or the grammar's exact
    shape when a call is `forced`; without tools the whole reply is text."""
    if forced:
        parser: StreamParser | None = ForcedCallParser(forced)
    elif dialect is not None and tools:
        parser = dialect.stream_parser([tool["function"]["name"] for tool in tools])
    else:
        parser = None
    return ResponseProcessor(stop_strings, parser)


class NativeCalls:
    """Tool calls an OpenAI-compatible server streams as `delta.tool_calls`, put together by index."""

    def __init__(self, tools: Sequence[dict[str, Any]]) -> None:
        self._tools = tools
        self._calls = PartialCalls()

    def add(self, fragments: Sequence[CallFragment]) -> None:
        for fragment in fragments:
            self._calls.add(fragment)

    def decode(self) -> tuple[list[ToolCall], str | None]:
        calls: list[ToolCall] = []
        problems: list[str] = []
        for partial in self._calls:
            try:
                arguments = loads_bounded(partial.arguments or "{}")
            except JSONLimitError as exc:
                problems.append(f"{partial.name or 'a tool'} (arguments are too big to decode: {exc.msg})")
                continue
            except json.JSONDecodeError:
                problems.append(f"{partial.name or 'a tool'} (arguments are not valid JSON)")
                continue
            arguments = self._wrap_lone_argument(arguments, partial.name)
            if not partial.name or not isinstance(arguments, dict):
                problems.append(f"{partial.name or 'a call without a name'} (not a function call)")
                continue
            call = ToolCall(name=partial.name, arguments=arguments)
            call.id = partial.id or call.id
            calls.append(call)
        notice = f"The server sent tool calls that could not be used: {', '.join(problems)}." if problems else None
        return calls, notice

    def _wrap_lone_argument(self, arguments: Any, name: str) -> Any:
        """vLLM 0.32's forced calls (and some small models) send a one-parameter tool's value bare ("Paris" instead
        of {"city": "Paris"}); for a tool with exactly one parameter that is unambiguous, so it is wrapped."""
        if isinstance(arguments, dict):
            return arguments
        for tool in self._tools:
            properties = tool["function"].get("parameters", {}).get("properties", {})
            if tool["function"]["name"] == name and len(properties) == 1:
                return {next(iter(properties)): arguments}
        return arguments


class PromptTooLong(ValueError):
    """Even the newest user turn alone does not fit the context window."""


@dataclass
class FittedPrompt:
    messages: list[dict[str, Any]]
    token_count: int
    dropped_messages: int


def fit_to_context(
    messages: Sequence[dict[str, Any]],
    count_tokens: Callable[[list[dict[str, Any]]], int],
    budget: int,
) -> FittedPrompt:
    """Drop the oldest turns (a user message and what answered it) until the prompt fits `budget` tokens.

    The system prompt and the newest user turn are always kept; if they alone are too long, PromptTooLong says
    by how much, because silently cutting a user's own message would answer a question they did not ask. A turn
    is dropped whole, so a tool call is never separated from its result.

    Linear in the conversation: the whole prompt is counted once; if it is too long, the cut is found by counting
    only the newest turns, in spans that double back from the newest turn and then halve (a prompt only grows as
    turns are added). Counting once per dropped turn was quadratic: 10,000 short messages took minutes.
    """
    system = [m for m in messages[:1] if m.get("role") == "system"]
    rest = list(messages[len(system) :])
    # Candidate cut points: keep everything, then start at each later user message in turn.
    turn_starts = [0] + [i for i, m in enumerate(rest) if m.get("role") == "user" and i > 0]
    counts: dict[int, int] = {}

    def tokens(turn: int) -> int:
        if turn not in counts:
            counts[turn] = count_tokens(system + rest[turn_starts[turn] :])
        return counts[turn]

    newest = len(turn_starts) - 1
    if tokens(0) > budget and tokens(newest) > budget:
        raise PromptTooLong(
            f"The prompt needs {tokens(newest)} tokens but only {budget} fit "
            "(context window minus room for the answer). Shorten the message or the system prompt, "
            "lower 'Max new tokens', or use a model with a longer context window."
        )
    first = 0 if tokens(0) <= budget else _first_fitting(lambda turn: tokens(turn) <= budget, newest)
    start = turn_starts[first]
    return FittedPrompt(system + rest[start:], tokens(first), dropped_messages=start)


def _first_fitting(fits: Callable[[int], bool], newest: int) -> int:
    """The oldest turn to start at, given that starting at turn 0 does not fit and at `newest` does."""
    good, bad, step = newest, 0, 1
    while good - step > bad:  # back from the newest turn in doubling steps
        if not fits(good - step):
            bad = good - step
            break
        good, step = good - step, step * 2
    while good - bad > 1:  # then halve the gap between the last start that fit and the first that did not
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good
