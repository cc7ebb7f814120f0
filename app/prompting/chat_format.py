"""The two ends every client shares: conversation -> prompt messages (`process_input`) and model output ->
visible text and tool calls (`process_response`, whose `ResponseProcessor` the shared streaming helper in
app/clients/streaming.py feeds for every backend), plus fitting a prompt into the context window.

Tool-call dialects (app/prompting/dialects/) decide how tools, past calls and results are rendered for a model family
and how its replies are parsed; the local clients apply them when they turn these messages into a prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.domain.chat_messages import ChatMessage, ContentPart
from app.domain.conversation import (
    Attachment,
    CallFragment,
    Conversation,
    Message,
    PartialCalls,
    ToolCall,
    image_part,
    text_parts,
)
from app.limits.json_limits import JSONLimitError, loads_bounded
from app.prompting.dialects import ConstrainedCall, Dialect, ParsedResponse, StreamParser
from app.prompting.dialects.dialect import ForcedCallParser
from app.prompting.stop_strings import StopStringFilter
from app.prompting.thinking import ThinkingMarkers, ThinkingSplitter


@dataclass(frozen=True)
class ImagePolicy:
    """Which pictures a prompt shows the model. A picture it does not show becomes a note in the text, so that the
    model (and whoever reads the prompt) knows one was there: never dropped silently.

    `see`: show the pictures of the newest user message (False: the user chose a text-only answer).
    `see_earlier`: show those of earlier messages (False for a model that cannot see: it refuses a new picture,
    but a conversation where the user once chose a text-only answer must go on).
    `tool_images`: also show the pictures tools returned (plots), after their results.
    `max_images`: show at most the newest this many (vLLM's per-prompt limit; memory on small machines).
    """

    see: bool = True
    see_earlier: bool = True
    tool_images: bool = False
    max_images: int | None = None

    def shown(self, conversation: Conversation) -> set[int]:
        """The ids of the image attachments to show, newest first up to `max_images`."""
        newest = conversation.last_user_index()
        candidates: list[int] = []
        for index, message in enumerate(conversation.messages):
            if not _belongs_in_prompt(message):
                continue
            if message.role == "user":
                visible = self.see if index == newest else self.see_earlier
            else:
                visible = self.tool_images and message.role == "tool"
            candidates += [id(image) for image in message.images] if visible else []
        if self.max_images is not None:
            candidates = candidates[len(candidates) - self.max_images:] if self.max_images > 0 else []
        return set(candidates)

    def note(self, image: Attachment, newest: bool) -> str:
        if not (self.see if newest else self.see_earlier):
            return f"[An image ({image.name}) was attached here; this model cannot see images.]"
        return (f"[An earlier image ({image.name}) is left out: a prompt shows at most {self.max_images} images, "
                "the newest ones.]")


def process_input(conversation: Conversation, system_prompt: str = "",
                  images: ImagePolicy | None = None) -> list[ChatMessage]:
    """OpenAI-format messages to prompt with: the system prompt first, failed or empty answers left out, the
    user's pictures as `image_url` parts as `images` allows (by default all of them, and no tool images)."""
    policy = images or ImagePolicy()
    shown = policy.shown(conversation)
    messages: list[ChatMessage] = []
    if system_prompt.strip():
        messages.append({"role": "system", "content": system_prompt.strip()})
    tool_images: list[tuple[str, Attachment]] = []  # images of the tool results just added, and their tool
    newest = conversation.last_user_index()
    for index, message in enumerate(conversation.messages):
        if not _belongs_in_prompt(message):
            continue
        if message.role != "tool" and tool_images:
            messages.append(_tool_images_message(tool_images))
            tool_images = []
        messages.append(_prompt_message(message, shown, policy, newest=index == newest))
        if message.role == "tool":
            tool_images += [(message.name or "the tool", image) for image in message.images if id(image) in shown]
    if tool_images:
        messages.append(_tool_images_message(tool_images))
    return messages


def _prompt_message(message: Message, shown: set[int], policy: ImagePolicy, newest: bool) -> ChatMessage:
    data = message.to_openai(current=newest or message.role != "user")
    if message.role != "user" or not message.images:
        return data
    parts: list[ContentPart] = [image_part(image) for image in message.images if id(image) in shown]
    notes = [policy.note(image, newest) for image in message.images if id(image) not in shown]
    text = "\n".join([*notes, message.prompt_text(newest)]).strip()
    data["content"] = [*parts, *text_parts(text)] if parts else text
    return data


def _tool_images_message(images: list[tuple[str, Attachment]]) -> ChatMessage:
    """Tool results hold text only (in OpenAI's API and in chat templates): the pictures tools made follow them in
    a user turn that says where they come from."""
    names = ", ".join(f"{image.name} from {tool}" for tool, image in images)
    return {"role": "user", "content": [*(image_part(image) for _, image in images),
                                        *text_parts(f"(The image output of the tool call above: {names}.)")]}


def _belongs_in_prompt(message: Message) -> bool:
    if message.role != "assistant":
        return True
    # An answer that failed, or was stopped before it said anything, is shown to the user but not fed back.
    return message.error is None and bool(message.content.strip() or message.tool_calls)


@dataclass
class ReplyPiece:
    """What a chunk of model output adds to the reply: text to show, its thought (reasoning models) and pieces of
    tool calls."""

    text: str = ""
    call_fragments: list[CallFragment] = field(default_factory=list)
    thinking: str = ""


class ResponseProcessor:
    """Model output -> visible text and tool calls, chunk by chunk, the same for every backend.

    Stop strings are cut first (never showing part of one), then a reasoning model's thought is split off
    (`thinking`; a server that parses thoughts itself sends them apart, as `thought` to `feed`), then the answer is
    split: by the dialect's parser on a local backend (`parser`), or from the call deltas an OpenAI-compatible
    server sends (`native_tools`). Calls stream as `CallFragment`s (name first, then argument text) and come whole
    from `finish`.

    Without `parallel_calls` a reply makes at most one call: the parser's reply ends with its first call (`stopped`,
    so the engine writes no more), and of a server's calls only the first is kept (the server was asked for one;
    this is for one that does not listen, and the server's own end of the reply is waited for, with its usage).
    """

    def __init__(self, stop_strings: Sequence[str] = (), parser: StreamParser | None = None,
                 native_tools: Sequence[dict[str, Any]] | None = None,
                 thinking: ThinkingSplitter | None = None, parallel_calls: bool = True) -> None:
        self._stops = StopStringFilter(stop_strings)
        self._parser = parser
        if parser is not None and not parallel_calls:
            parser.max_calls = 1
        self._native = NativeCalls(native_tools, first_only=not parallel_calls) if native_tools is not None else None
        self._thinking = thinking
        self._shown: list[str] = []  # the text shown so far, when no parser keeps it

    @property
    def stopped(self) -> bool:
        """A stop string ended the reply, or its last allowed call did: the engine should stop too."""
        return self._stops.stopped or (self._parser is not None and self._parser.complete)

    @property
    def in_thought(self) -> bool:
        """The reply is inside its thought now."""
        return self._thinking is not None and self._thinking.thinking

    def feed(self, text: str, native_fragments: Sequence[CallFragment] = (), thought: str = "") -> ReplyPiece:
        if self.stopped:  # outputs the engine wrote before it heard: they are not part of the reply
            return ReplyPiece()
        visible = self._stops.feed(text) if text else ""
        thinking = ""
        if self._thinking is not None and visible:
            thinking, visible = self._thinking.feed(visible)
        piece = self._split(visible, native_fragments)
        piece.thinking = thought + thinking
        return piece

    def finish(self) -> tuple[ReplyPiece, ParsedResponse, str | None]:
        """The rest of the reply, the whole parse (content and calls) and a notice about calls that were unusable."""
        rest, thinking = self._stops.flush(), ""
        if self._thinking is not None:
            thinking, answer = self._thinking.feed(rest)
            more_thinking, more_answer = self._thinking.finish()
            thinking, rest = thinking + more_thinking, answer + more_answer
        piece = self._split(rest, ())
        piece.thinking = thinking
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
            native_fragments = self._native.add(native_fragments)
        return ReplyPiece(visible, list(native_fragments))


def process_response(dialect: Dialect | None, tools: Sequence[dict[str, Any]], forced: Sequence[ConstrainedCall] = (),
                     stop_strings: Sequence[str] = (), thinking: ThinkingMarkers | None = None,
                     thinking_started: bool = False, parallel_calls: bool = True) -> ResponseProcessor:
    """The processor for one reply of a local backend: the dialect's parser for `tools`, or the grammar's exact
    shape when a call is `forced`; without tools the whole reply is text. With `thinking` markers (a reasoning
    model's template) a thought at the start of the reply is split off (already open when `thinking_started`); a
    call the dialect begins inside an unclosed thought ends it, so the call still parses. Without
    `parallel_calls` the reply ends with its first call."""
    if forced:
        parser: StreamParser | None = ForcedCallParser(forced)
    elif dialect is not None and tools:
        parser = dialect.stream_parser([tool["function"]["name"] for tool in tools])
    else:
        parser = None
    splitter = None
    if thinking is not None and not forced:  # a forced call's grammar leaves no room for a thought
        # Only distinctive call openings (a tag, a JSON object); GLM-4's bare "name\n" could be any line of thought.
        exits = [dialect.json_call(tool).prefix for tool in tools] if dialect is not None else []
        splitter = ThinkingSplitter(thinking, thinking_started, [exit for exit in exits if exit[:1] in "<{["])
    return ResponseProcessor(stop_strings, parser, thinking=splitter, parallel_calls=parallel_calls)


class NativeCalls:
    """Tool calls an OpenAI-compatible server streams as `delta.tool_calls`, put together by index; with
    `first_only`, only the call of the first index the server names."""

    def __init__(self, tools: Sequence[dict[str, Any]], first_only: bool = False) -> None:
        self._tools = tools
        self._calls = PartialCalls()
        self._first_only = first_only
        self._first_index: int | None = None

    def add(self, fragments: Sequence[CallFragment]) -> list[CallFragment]:
        """Take `fragments`; those kept, to stream on."""
        kept = []
        for fragment in fragments:
            if self._first_index is None:
                self._first_index = fragment.index
            if self._first_only and fragment.index != self._first_index:
                continue
            self._calls.add(fragment)
            kept.append(fragment)
        return kept

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
    """Even the newest user turn alone does not fit the context window; `needed` is its token count (with the
    system prompt), `budget` what fit."""

    def __init__(self, message: str, needed: int = 0, budget: int = 0) -> None:
        super().__init__(message)
        self.needed, self.budget = needed, budget


@dataclass
class FittedPrompt:
    messages: list[ChatMessage]
    token_count: int
    dropped_messages: int


def fit_to_context(
    messages: Sequence[ChatMessage],
    count_tokens: Callable[[list[ChatMessage]], int],
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
    # Candidate cut points: keep everything, then start at each later user message in turn (but for the one that
    # shows a tool's images right after its result: that belongs to the tool call's turn).
    turn_starts = [0] + [i for i, m in enumerate(rest)
                         if m.get("role") == "user" and i > 0 and rest[i - 1].get("role") != "tool"]
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
            "lower 'Max new tokens', or use a model with a longer context window.",
            needed=tokens(newest), budget=budget,
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
