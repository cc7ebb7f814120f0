"""One assistant turn as a stream of UI-agnostic events, which the Streamlit pages render.

With tools, a turn is a loop: generate → parse → validate → run the tool → append its result → generate again,
for at most `max_rounds` generations. Every generation and every tool result is recorded in the conversation
as it happens, also when the consumer stops reading (Stop button, closed tab): closing the event generator
cancels the running generation or abandons the running tool call, and keeps what happened so far.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace

from app.chat_format import ImagePolicy, process_input
from app.clients.base import Client, ClientError, GenerationParams, ToolRequest
from app.conversation import AnswerMetrics, CallFragment, Conversation, Message, PartialCalls, ToolCall
from app.tools.registry import ToolRegistry, ToolResult

DEFAULT_MAX_ROUNDS = 4
_TOOL_POLL_S = 0.1


@dataclass
class TextDelta:
    text: str


@dataclass
class ThinkingDelta:
    """More of a reasoning model's thought (shown apart from the answer, never fed back)."""

    text: str


@dataclass
class Notice:
    text: str


@dataclass
class Waiting:
    """Nothing new yet (busy backend, running tool); a UI uses this beat to stay responsive to Stop."""


@dataclass
class ToolCallWriting:
    """The model is writing a tool call: its name and the arguments text so far (JSON, maybe unfinished)."""

    index: int
    name: str
    arguments: str


@dataclass
class ToolCallStarted:
    call: ToolCall


@dataclass
class ToolCallFinished:
    call: ToolCall
    result: ToolResult
    message: Message  # the tool message now in the conversation


@dataclass
class AnswerDone:
    """One generation finished; its message (content, tool calls, metrics) is in the conversation."""

    message: Message


@dataclass
class TurnError:
    message: str


@dataclass
class TurnDone:
    message: Message  # the last assistant message of the turn


# Everything a turn yields. A UI matches on it exhaustively (app/ui/live_turn.py), so a new event type is a type
# error there until it is drawn.
TurnEvent = (TextDelta | ThinkingDelta | Waiting | ToolCallWriting | Notice | AnswerDone | ToolCallStarted
             | ToolCallFinished | TurnError | TurnDone)


@dataclass(frozen=True)
class ToolSettings:
    registry: ToolRegistry
    choice: str = "auto"  # auto | none | required | a tool name; applies to the first generation of the turn
    dialect: str | None = None
    max_rounds: int = DEFAULT_MAX_ROUNDS
    follow_up: str = "auto"  # the choice after tool results: "none" for models that cannot call tools themselves

    def request(self, round_index: int) -> ToolRequest:
        # A forced choice holds for the first generation only, then the model may answer from the result
        # (otherwise "required" would call tools forever); the last allowed round must answer in words.
        if round_index + 1 >= self.max_rounds:
            choice = "none"
        else:
            choice = self.choice if round_index == 0 else self.follow_up
        return ToolRequest(tools=tuple(self.registry.schemas()), choice=choice, dialect=self.dialect)


def run_turn(
    client: Client,
    conversation: Conversation,
    params: GenerationParams,
    system_prompt: str = "",
    cancel: threading.Event | None = None,
    tools: ToolSettings | None = None,
    images: ImagePolicy | None = None,
) -> Generator[TurnEvent, None, None]:
    """Answer the conversation's last message, calling tools as the model asks; record everything in it.
    `images`: which pictures the prompts show (capped at what the client takes; tool images only to a model that
    may see them)."""
    cancel = cancel or threading.Event()
    images = _image_policy(client, images or ImagePolicy())
    rounds = max(1, tools.max_rounds) if tools else 1
    answer = Message(role="assistant")
    for round_index in range(rounds):
        request = tools.request(round_index) if tools and len(tools.registry.names) else None
        answer = yield from _generate(client, conversation, params, system_prompt, cancel, request, images)
        if answer.error or answer.stopped or not answer.tool_calls or tools is None:
            break
        for call in answer.tool_calls:
            yield ToolCallStarted(call)
            message = yield from _run_tool(tools.registry, conversation, call, cancel)
            if message.tool_status == "stopped":
                yield TurnDone(answer)
                return
    yield TurnDone(answer)


def _generate(
    client: Client,
    conversation: Conversation,
    params: GenerationParams,
    system_prompt: str,
    cancel: threading.Event,
    request: ToolRequest | None,
    images: ImagePolicy,
) -> Generator[TurnEvent, None, Message]:
    """One generation, streamed; returns the assistant message it appended."""
    answer = Message(role="assistant", metrics=AnswerMetrics())
    parts: list[str] = []
    thought: list[str] = []
    writing = PartialCalls()  # the calls being written
    started = time.perf_counter()
    try:
        messages = process_input(conversation, system_prompt, images)
        with closing(client.stream(messages, params, cancel, request)) as deltas:
            for delta in deltas:
                answer.metrics = delta.metrics
                if delta.notice:
                    yield Notice(delta.notice)
                if delta.thinking:
                    thought.append(delta.thinking)
                    yield ThinkingDelta(delta.thinking)
                if delta.text:
                    parts.append(delta.text)
                    yield TextDelta(delta.text)
                yield from _write(writing, delta.call_fragments)
                if delta.tool_calls:
                    answer.tool_calls = list(delta.tool_calls)
                if delta.is_heartbeat:
                    yield Waiting()
        _check_forced_call(answer, request)
    except ClientError as exc:
        answer.error = str(exc)
        _mark(answer, "error", started)
        yield TurnError(str(exc))
    except Exception as exc:  # a bug must end this turn with a message, not take the page down
        answer.error = f"Unexpected error in the backend: {type(exc).__name__}: {exc}"
        _mark(answer, "error", started)
        yield TurnError(answer.error)
    except GeneratorExit:
        cancel.set()  # the consumer left: the client's own cleanup already stopped generation
        _mark(answer, "cancelled", started)
        raise
    finally:
        answer.content = "".join(parts).strip()
        answer.thinking = "".join(thought).strip()
        conversation.add(answer)
    yield AnswerDone(answer)
    return answer


def _image_policy(client: Client, wanted: ImagePolicy) -> ImagePolicy:
    """The newest user message's pictures go to every client (one that cannot see refuses them clearly); earlier
    pictures and tools' pictures only to a model that may see them (the user already chose for those)."""
    capabilities = client.capabilities
    limit = capabilities.max_images
    sees = capabilities.vision is not False
    max_images = limit if wanted.max_images is None else min(limit or wanted.max_images, wanted.max_images)
    return replace(wanted, see_earlier=wanted.see_earlier and sees, tool_images=wanted.tool_images and sees,
                   max_images=max_images)


def _run_tool(
    registry: ToolRegistry, conversation: Conversation, call: ToolCall, cancel: threading.Event
) -> Generator[TurnEvent, None, Message]:
    """Run one call, beating while it runs; returns the tool message it appended (also when stopped)."""
    message = Message(role="tool", tool_call_id=call.id, name=call.name)
    running = registry.start(call.name, call.arguments)
    result: ToolResult | None = None
    try:
        while (result := running.wait(_TOOL_POLL_S)) is None:
            if cancel.is_set():
                break
            yield Waiting()
    finally:
        if result is None:  # Stop pressed or the consumer left while the tool ran
            result = running.cancel()
            message.tool_status = "stopped"
        message.content = result.for_model()
        if message.content != result.content:
            message.display_text = result.content
        message.duration_s = result.duration_s
        message.attachments = list(result.attachments)
        if message.tool_status is None:
            message.tool_status = "ok" if result.ok else "failed"
        conversation.add(message)
    yield ToolCallFinished(call, result, message)
    return message


def _write(writing: PartialCalls, fragments: list[CallFragment]) -> Iterator[ToolCallWriting]:
    """Add call pieces to the calls being written; what changed, a call's name always on its own first."""
    changed: set[int] = set()
    for fragment in fragments:
        call = writing.add(fragment)
        if fragment.name:
            yield ToolCallWriting(call.index, call.name, call.arguments)
        elif fragment.arguments:
            changed.add(fragment.index)
    for call in writing:
        if call.index in changed:
            yield ToolCallWriting(call.index, call.name, call.arguments)


def _check_forced_call(answer: Message, request: ToolRequest | None) -> None:
    """A forced call cut off by the token limit is no call at all: say what to change."""
    metrics = answer.metrics
    if request is not None and request.forced_tools and not answer.tool_calls and metrics is not None \
            and metrics.finish_reason == "length":
        raise ClientError(f"The model did not finish the tool call within {metrics.completion_tokens} new tokens. "
                          "Raise 'Max new tokens' and try again.")


def _mark(answer: Message, reason: str, started: float) -> None:
    metrics = answer.metrics or AnswerMetrics()
    if metrics.finish_reason is None or reason == "error":
        metrics.finish_reason = reason  # type: ignore[assignment]
    metrics.total_time_s = metrics.total_time_s or time.perf_counter() - started
    answer.metrics = metrics
