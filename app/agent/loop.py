"""One assistant turn as a stream of UI-agnostic events, which the Streamlit pages render.

With tools, a turn is a loop: generate → parse → validate → run the tool → append its result → generate again,
for at most `max_rounds` generations. Every generation and every tool result is recorded in the conversation
as it happens, also when the consumer stops reading (Stop button, closed tab): closing the event generator
cancels the running generation or abandons the running tool call, and keeps what happened so far.

Each tool has a run policy (`ToolSettings.policies`, app/tools/policy.py). A "never" tool is not offered to the
model. When an answer calls an "ask" tool, an open-world tool with words from a web page or a document in its
arguments (app/tools/provenance.py), or an open-world or destructive tool right after reading passages of the
user's documents, none of its calls runs: the turn yields ApprovalNeeded and ends, the
answer's calls unanswered in the conversation. That is the whole pending state (`pending_calls`), saved with the
conversation like any message; `resume_turn` answers the calls as the user decided and goes on with the same loop.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Collection, Generator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from opentelemetry.context import Context
from opentelemetry.trace import Status, StatusCode

from app.clients.client_protocol import Client, ClientError, GenerationParams, PromptWarming, ToolRequest
from app.domain.conversation import (
    MAX_MODEL_NAME,
    AnswerMetrics,
    CallFragment,
    Conversation,
    Message,
    PartialCalls,
    ToolCall,
)
from app.prompting.chat_format import ImagePolicy, process_input
from app.telemetry import spans
from app.tools.policy import RunPolicy
from app.tools.provenance import foreign_text, read_passages
from app.tools.questions import AskedQuestion
from app.tools.tool_registry import RunningCall, ToolRegistry, ToolResult

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
class ApprovalNeeded:
    """The answer just done calls tools the user decides on (policy "ask"): these calls. None of the answer's calls
    has run, those that need no asking included (results stay in the order of the calls); the turn ends next
    (TurnDone) with them all unanswered, until `resume_turn`."""

    calls: list[ToolCall]


@dataclass
class QuestionAsked:
    """The running call asks the user something (an MCP server's elicitation): `asked`, answered through its future.
    The turn ends next (TurnDone) with the call still running, its result not yet in the conversation: whoever
    shows the question keeps `running` and gives it back to `resume_turn` (as `running`) once the user answered, and
    the turn goes on waiting for the result."""

    call: ToolCall
    asked: AskedQuestion
    running: RunningCall


@dataclass
class TurnDone:
    message: Message  # the last assistant message of the turn


# Everything a turn yields. A UI matches on it exhaustively (app/frontends/streamlit/live_turn.py), so a new event type
# is a type error there until it is drawn.
TurnEvent = (TextDelta | ThinkingDelta | Waiting | ToolCallWriting | Notice | AnswerDone | ToolCallStarted
             | ToolCallFinished | ApprovalNeeded | QuestionAsked | TurnError | TurnDone)

DECLINED = "The user declined to run this call."


@dataclass(frozen=True)
class ToolSettings:
    registry: ToolRegistry
    choice: str = "auto"  # auto | none | required | a tool name; applies to the first generation of the turn
    dialect: str | None = None
    max_rounds: int = DEFAULT_MAX_ROUNDS
    follow_up: str = "auto"  # the choice after tool results: "none" for models that cannot call tools themselves
    # Each tool's run policy by registry name, as app/tools/policy.py's policy_for resolves it; a tool not named
    # here runs ("auto"), as every tool did before policies. Left out of the hash: a mapping has none.
    policies: Mapping[str, RunPolicy] = field(default_factory=dict, hash=False)

    def policy(self, name: str) -> RunPolicy:
        return self.policies.get(name, "auto")

    @property
    def offered(self) -> ToolRegistry:
        """The tools the model is offered and whose calls may run: all but the "never" ones. A call to one of those
        (a model may copy a name from earlier in the conversation) is answered as a call to a tool that does not
        exist."""
        return self.registry.subset(name for name in self.registry.names if self.policy(name) != "never")

    def needs_approval(self, calls: Sequence[ToolCall], conversation: Conversation) -> list[ToolCall]:
        """The calls the user decides on before they run: those of offered tools whose policy is "ask", and those of
        open-world tools whose arguments carry words from outside the user (`why_asking`)."""
        offered = self.offered
        return [call for call in calls if call.name in offered and self.why_asking(call, conversation) is not None]

    def why_asking(self, call: ToolCall, conversation: Conversation) -> str | None:
        """Why this call waits for the user ("its policy is Ask", or where its arguments' words came from), None
        when it runs as made. A call to an open-world tool (the web, an API) whose arguments carry text that
        entered `conversation` from a tool result or a document, and not from the user, asks whatever its policy:
        a page must not choose where the conversation is sent (app/tools/provenance.py)."""
        policy = self.policy(call.name)
        if policy == "ask":
            return "its run policy is Ask"
        tool = self.registry.get(call.name)
        if policy == "auto" and tool is not None and tool.hints.effective.open_world:
            found = foreign_text(call.arguments, conversation)
            if found is not None:
                return f"it reaches the open world and {found.describe()}"
        if policy == "auto" and tool is not None and (tool.hints.effective.open_world or
                                                      tool.hints.effective.destructive):
            # A document may carry instructions: what the model does right after reading one, out in the world
            # or destructively, is the user's to allow.
            read = read_passages(conversation)
            if read is not None:
                effect = "reaches the open world" if tool.hints.effective.open_world else "may delete or overwrite"
                return f"it {effect}, right after the model read {read}, which may carry instructions"
        return None

    def request(self, round_index: int) -> ToolRequest:
        # A forced choice holds for the first generation only, then the model may answer from the result
        # (otherwise "required" would call tools forever); the last allowed round must answer in words.
        offered = self.offered
        if round_index + 1 >= self.max_rounds:
            choice = "none"
        else:
            choice = self.choice if round_index == 0 else self.follow_up
        if choice not in ("auto", "none", "required") and choice not in offered:
            choice = "auto"  # the forced tool is one that never runs: the user's "never" wins over the choice
        return ToolRequest(tools=tuple(offered.schemas()), choice=choice, dialect=self.dialect)


@dataclass(frozen=True)
class Decision:
    """The user's decision on a call that waits (`resume_turn`): run it, with `arguments` in place of the model's
    when given (edited; checked against the tool's schema first), or deny it, saying why in `reason` if they like."""

    action: Literal["run", "deny"]
    arguments: dict[str, Any] | None = None  # "run" only: the edited arguments; None runs the model's own
    reason: str = ""  # "deny" only: shown to the model after DECLINED

    def __post_init__(self) -> None:
        if self.action not in ("run", "deny"):
            raise ValueError(f"a decision is 'run' or 'deny', not {self.action!r}")
        if self.action == "deny" and self.arguments is not None:
            raise ValueError("a denied call runs with no arguments: give arguments with 'run' only")


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
    may see them). An answer that calls an "ask" tool ends the turn with ApprovalNeeded, then TurnDone."""
    turn = _Turn(client, conversation, params, system_prompt, cancel or threading.Event(), tools,
                 _image_policy(client, images or ImagePolicy()))
    yield from _traced(turn, rounds_used=0)


def warm_turn(client: Client, params: GenerationParams, system_prompt: str = "",
              tools: ToolSettings | None = None) -> None:
    """Have a client that can (`PromptWarming`) read a first turn's common beginning ahead of it: the system prompt
    and, with `tools`, their schemas, which for 10 tools are over a thousand tokens. The Tools page's first answer
    then reads only the user's message."""
    if isinstance(client, PromptWarming):
        client.warm(process_input(Conversation(), system_prompt), params, tools.request(0) if tools else None)


def pending_calls(conversation: Conversation) -> list[ToolCall]:
    """The calls waiting for the user: those of the conversation's last assistant message that no tool message
    answers yet (the message's own ToolCall objects, in order). Empty when the conversation goes on after it (a user
    message), when that answer failed or was stopped, or when one of its calls was stopped (the user stopped the
    turn). Besides a turn that paused for approval (ApprovalNeeded), a turn left right after an answer with calls
    (before its first call started) leaves them waiting too; `resume_turn` answers either."""
    return _waiting(conversation)[1]


def resume_turn(
    client: Client,
    conversation: Conversation,
    params: GenerationParams,
    system_prompt: str,
    cancel: threading.Event | None,
    tools: ToolSettings,
    images: ImagePolicy | None,
    decisions: Mapping[str, Decision],
    running: Mapping[str, RunningCall] | None = None,
) -> Generator[TurnEvent, None, None]:
    """Go on with a turn whose calls wait (`pending_calls`): answer each in order as `decisions` (by call id) says,
    then continue exactly as run_turn does after tool results, within the same `max_rounds` (the generations since
    the last user message count), asking again if the model calls an "ask" tool again.

    A call that runs with edited arguments keeps the model's in `ToolCall.edited_from`, and the answer's call holds
    the arguments that ran, which the model reads. A denied call is answered DECLINED (": reason" when given), with
    tool_status "denied"; it is reported as any call is (ToolCallStarted, ToolCallFinished with a failed result).

    Checked at once, before anything is recorded or run, so that a UI can show why and keep its cards: ValueError
    when nothing waits, when a call that needs approval (`ToolSettings.needs_approval`) has no decision, when a
    decision names no waiting call, when a call of a "never" tool is to run, or when edited arguments do not match
    the tool's schema (the registry's message). Calls that need no approval run as they are unless decided
    otherwise.

    `running`: the calls that were running already when the turn paused (a question, QuestionAsked), by call id:
    the turn waits for their results instead of running them again; they need no decision."""
    answer, waiting = _waiting(conversation)
    started = {call_id: handle for call_id, handle in (running or {}).items()
               if any(call.id == call_id for call in waiting)}
    decided = {call_id: decision for call_id, decision in decisions.items() if call_id not in started}
    check_decisions(conversation, tools, decided, started)
    assert answer is not None
    turn = _Turn(client, conversation, params, system_prompt, cancel or threading.Event(), tools,
                 _image_policy(client, images or ImagePolicy()))
    return _traced(turn, _rounds_used(conversation), resumed=(answer, waiting, decided, started))


STOPPED_BEFORE_RUNNING = "The user stopped the turn before this call ran."


def stop_pending(conversation: Conversation) -> list[Message]:
    """End a turn whose calls wait (the user pressed Stop instead of deciding): each waiting call is answered, as
    stopped, without running, and nothing more is generated. Returns the tool messages added (none when nothing
    waits)."""
    _, waiting = _waiting(conversation)
    return [conversation.add(Message(role="tool", content=STOPPED_BEFORE_RUNNING, tool_call_id=call.id,
                                     name=call.name, tool_status="stopped")) for call in waiting]


def _waiting(conversation: Conversation) -> tuple[Message | None, list[ToolCall]]:
    """The last assistant message and its calls that wait (see pending_calls); (None, []) when nothing waits."""
    answered: set[str | None] = set()
    for message in reversed(conversation.messages):
        if message.role == "tool":
            if message.tool_status == "stopped":
                break
            answered.add(message.tool_call_id)
            continue
        if message.role == "assistant" and not message.error and not message.stopped:
            waiting = [call for call in message.tool_calls if call.id not in answered]
            return (message, waiting) if waiting else (None, [])
        break
    return None, []


@dataclass(frozen=True)
class _Turn:
    """What every step of one turn works with."""

    client: Client
    conversation: Conversation
    params: GenerationParams
    system_prompt: str
    cancel: threading.Event
    tools: ToolSettings | None
    images: ImagePolicy
    trace: Context | None = None  # the turn's span (app/telemetry/spans.py): its model and tool calls' parent


_Resumed = tuple[Message, list[ToolCall], dict[str, Decision], dict[str, RunningCall]]


def _traced(turn: _Turn, rounds_used: int, resumed: _Resumed | None = None) -> Generator[TurnEvent, None, None]:
    """The loop inside the turn's span (app/telemetry/spans.py), ended however the turn ends."""
    span, context = spans.start_turn(turn.client.capabilities.model_id, turn.client.backend)
    try:
        yield from _loop(replace(turn, trace=context), rounds_used, resumed)
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
        raise
    finally:
        span.end()


def _loop(turn: _Turn, rounds_used: int, resumed: _Resumed | None = None) -> Generator[TurnEvent, None, None]:
    """The tool loop, from generation `rounds_used` on (0 for a new turn). `resumed`: the answer whose calls wait,
    those calls, the user's decisions on them and those of them running already, answered before anything is
    generated."""
    tools = turn.tools
    rounds = max(1, tools.max_rounds) if tools else 1
    offered = tools.offered if tools else ToolRegistry()
    round_index = rounds_used
    answer, calls, decisions, started = resumed or (Message(role="assistant"), [], {}, {})
    while True:
        if not calls:
            if round_index >= rounds:
                break
            request = tools.request(round_index) if tools and offered.names else None
            answer = yield from _generate(turn.client, turn.conversation, turn.params, turn.system_prompt,
                                          turn.cancel, request, turn.images, turn.trace)
            round_index += 1
            if answer.error or answer.stopped or not answer.tool_calls or tools is None:
                break
            asking = tools.needs_approval(answer.tool_calls, turn.conversation)
            if asking:
                asked_at = time.time()
                for call in asking:
                    call.asked_at = asked_at  # the start of its approval wait, in its trace
                yield ApprovalNeeded(asking)
                break
            calls = answer.tool_calls
        for call in calls:
            decision = decisions.get(call.id)
            span = spans.start_tool(turn.trace or Context(), call, tools.policy(call.name) if tools else None,
                                    _decision_name(decision, call))
            message = None
            try:
                message = yield from _answer_call(offered, turn.conversation, call, decision,
                                                  turn.cancel, started.get(call.id), spans.context_of(span))
            finally:
                spans.end_tool(span, message)
            if message is None or message.tool_status == "stopped":  # a question for the user, or stopped
                yield TurnDone(answer)
                return
        calls, decisions, started = [], {}, {}
    yield TurnDone(answer)


def _decision_name(decision: Decision | None, call: ToolCall) -> str | None:
    if decision is None:
        return None
    if decision.action == "run" and decision.arguments is not None and decision.arguments != call.arguments:
        return "edited"
    return decision.action


def _answer_call(registry: ToolRegistry, conversation: Conversation, call: ToolCall, decision: Decision | None,
                 cancel: threading.Event, running: RunningCall | None = None, trace: Context | None = None
                 ) -> Generator[TurnEvent, None, Message | None]:
    """Run one call (with the user's edit, if any; `running`: it runs already) or record that the user declined it;
    returns its tool message, None when it waits for the user's answer to a question."""
    if running is not None:
        yield ToolCallStarted(call)
        return (yield from _run_tool(registry, conversation, call, cancel, running))
    if decision is not None and decision.action == "deny":
        yield ToolCallStarted(call)
        reason = decision.reason.strip()
        text = f"{DECLINED.removesuffix('.')}: {reason}" if reason else DECLINED
        message = conversation.add(Message(role="tool", content=text, tool_call_id=call.id, name=call.name,
                                           tool_status="denied"))
        yield ToolCallFinished(call, ToolResult(text, ok=False), message)
        return message
    if decision is not None and decision.arguments is not None and decision.arguments != call.arguments:
        # The answer's call is changed in place: what ran is what the model reads, the model's own kept beside it.
        call.edited_from, call.arguments = call.arguments, copy.deepcopy(decision.arguments)
    yield ToolCallStarted(call)
    return (yield from _run_tool(registry, conversation, call, cancel, trace=trace))


def check_decisions(conversation: Conversation, tools: ToolSettings, decisions: Mapping[str, Decision],
                    running: Collection[str] = ()) -> None:
    """resume_turn's checks, without resuming: ValueError when they fail (see resume_turn). `running`: the ids of
    the calls that run already (they need no decision)."""
    answer, waiting = _waiting(conversation)
    if answer is None or not waiting:
        raise ValueError("no tool calls are waiting for a decision")
    _check_decisions([call for call in waiting if call.id not in running], decisions, tools, conversation)


def _check_decisions(waiting: list[ToolCall], decisions: Mapping[str, Decision], tools: ToolSettings,
                     conversation: Conversation) -> None:
    ids = {call.id for call in waiting}
    for call_id in decisions:
        if call_id not in ids:
            raise ValueError(f"no waiting tool call has the id {call_id!r}")
    asking = {call.id for call in tools.needs_approval(waiting, conversation)}
    for call in waiting:
        decision = decisions.get(call.id)
        if decision is None:
            if call.id in asking:
                raise ValueError(f"the call to {call.name} ({call.id}) needs a decision: run or deny")
            continue
        if decision.action != "run":
            continue
        if call.name in tools.registry and tools.policy(call.name) == "never":
            raise ValueError(f"{call.name} is set never to run: deny the call, or change the tool's setting first")
        if decision.arguments is not None:
            problem = tools.registry.validation_error(call.name, decision.arguments)
            if problem is not None:
                raise ValueError(problem)


def _rounds_used(conversation: Conversation) -> int:
    """The generations of the turn so far: the answers with calls since the last user message (the turn's own, which
    only tool messages come between)."""
    used = 0
    for message in reversed(conversation.messages):
        if message.role == "tool":
            continue
        if message.role != "assistant" or not message.tool_calls:
            break
        used += 1
    return used


def _generate(
    client: Client,
    conversation: Conversation,
    params: GenerationParams,
    system_prompt: str,
    cancel: threading.Event,
    request: ToolRequest | None,
    images: ImagePolicy,
    trace: Context | None = None,
) -> Generator[TurnEvent, None, Message]:
    """One generation, streamed, in its span (a child of `trace`, the turn's); returns the assistant message it
    appended."""
    answer = Message(role="assistant", metrics=AnswerMetrics(), model=client.capabilities.model_id[:MAX_MODEL_NAME])
    span = None
    parts: list[str] = []
    thought: list[str] = []
    writing = PartialCalls()  # the calls being written
    started = time.perf_counter()
    try:
        messages = process_input(conversation, system_prompt, images)
        span = spans.start_chat(trace or Context(), answer.model, client.backend, params, messages)
        answer.trace_id = spans.trace_id(span)
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
        if span is not None:
            spans.end_chat(span, answer)
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
    registry: ToolRegistry, conversation: Conversation, call: ToolCall, cancel: threading.Event,
    running: RunningCall | None = None, trace: Context | None = None,
) -> Generator[TurnEvent, None, Message | None]:
    """Run one call (or wait for `running`, started before), beating while it runs; returns the tool message it
    appended (also when stopped), or None when the call asks the user a question: then it runs on, its result left
    to whoever resumes the turn with it (QuestionAsked)."""
    message = Message(role="tool", tool_call_id=call.id, name=call.name)
    running = running or registry.start(call.name, call.arguments, trace)
    result: ToolResult | None = None
    asked = False
    try:
        while (result := running.wait(_TOOL_POLL_S)) is None:
            if cancel.is_set():
                break
            question = running.questions.pending
            if question is not None:
                yield QuestionAsked(call, question, running)
                asked = True  # taken: whoever took it holds the call now (closed before that: it is stopped)
                return None
            yield Waiting()
    finally:
        if not asked:  # asked: the call runs on, waiting for its answer, and is not ours to stop
            if result is None:  # Stop pressed or the consumer left while the tool ran
                result = running.cancel()
                message.tool_status = "stopped"
            _record(message, result)
            conversation.add(message)
    assert result is not None
    yield ToolCallFinished(call, result, message)
    return message


def _record(message: Message, result: ToolResult) -> None:
    """A call's result in its tool message."""
    message.content = result.for_model()
    if message.content != result.content:
        message.display_text = result.content
    message.duration_s = result.duration_s
    message.attachments = list(result.attachments)
    message.structured = result.structured
    if message.tool_status is None:
        message.tool_status = "ok" if result.ok else "failed"


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
