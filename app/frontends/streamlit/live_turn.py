"""Streaming one turn into an assistant bubble: the agent's events (app/agent/loop.py) drawn as they come."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from typing import TYPE_CHECKING, assert_never

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.agent.loop import (
    AnswerDone,
    ApprovalNeeded,
    Decision,
    Notice,
    QuestionAsked,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallWriting,
    ToolSettings,
    TurnDone,
    TurnError,
    TurnEvent,
    Waiting,
    resume_turn,
    run_turn,
)
from app.clients.client_protocol import Client
from app.domain.conversation import Conversation, Message
from app.frontends.streamlit import approvals, model_status, persistence, state
from app.frontends.streamlit import question_forms as questions
from app.frontends.streamlit.messages import (
    THOUGHT_ICON,
    arguments,
    card_label,
    card_state,
    metrics_caption,
    model_answer_mark,
    result_body,
    text_markdown,
    thought_label,
    tool_images,
)
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.frontends.streamlit.sidebar import SidebarState
from app.prompting.chat_format import ImagePolicy
from app.tools.tool_registry import RunningCall, ToolRegistry

if TYPE_CHECKING:  # an internal module of Streamlit's: for annotations only, never at run time
    from streamlit.elements.lib.mutable_status_container import StatusContainer

_FLUSH_EVERY_S = 0.05  # re-render the growing answer at most 20 times a second
_STATUS_EVERY_S = 2.0  # redraw the model's status (how many answers it writes) this often while streaming


def stream_turn(
    page: str,
    client: Client,
    conversation: Conversation,
    sidebar: SidebarState,
    tools: ToolSettings | None = None,
    transform: Callable[[str], str] | None = None,
    images: ImagePolicy | None = None,
    decisions: Mapping[str, Decision] | None = None,
    running: Mapping[str, RunningCall] | None = None,
) -> None:
    """Stream a turn into an assistant bubble: text as it comes, a live card per tool call; each finished answer
    and tool result is saved to the page's stored conversation at once.

    Every turn (a sent message, Regenerate, an edit, "Answer the text only", each step of a tool loop) has the
    same Stop button at the top of its bubble. Pressing it (or anything else that reruns the script) starts a new
    run and makes this one raise inside its next render call; closing the event stream then cancels generation
    (or abandons the running tool) and the agent keeps what happened so far, marked stopped. The new run waits
    for that (state.wait_for_interrupted_turn) and so draws the stopped answer at once, with its metrics.

    With `decisions` (the user's, on the tool calls that wait: app/frontends/streamlit/approvals.py), the turn goes on
    from those calls instead (resume_turn); decisions it cannot take are shown on the cards, and nothing runs.
    `running`: the calls that run already, which asked the user a question now answered
    (app/frontends/streamlit/question_forms.py).
    """
    with state.turn_running(), st.chat_message("assistant"):
        st.button("Stop", key=f"stop/{page}", icon=":material/stop_circle:", type="secondary",
                  help="Stop this answer: what it wrote so far is kept, marked Stopped.")
        turn = LiveTurn(page, conversation, transform, decisions)
        saving_to = persistence.save_target(page)  # read now: a closed tab's run can no longer read its session
        if decisions is None:
            events = run_turn(client, conversation, sidebar.params, sidebar.system_prompt, tools=tools,
                              images=images)
        else:
            try:
                events = resume_turn(client, conversation, sidebar.params, sidebar.system_prompt, None,
                                     tools or ToolSettings(ToolRegistry()), images, decisions, running)
            except ValueError as exc:  # checked before anything runs: the cards stay, saying why
                approvals.remember_problem(page, f"Nothing ran: {exc}.")
                for call_id, handle in (running or {}).items():  # still running: this session holds them again
                    questions.remember(page, call_id, handle, decisions)
                return
        status_drawn = 0.0
        try:
            with closing(events):
                for event in events:
                    if time.monotonic() - status_drawn >= _STATUS_EVERY_S:  # the status fragment waits for the run
                        model_status.refresh(client)
                        status_drawn = time.monotonic()
                    turn.show(event)
        except BaseException:
            # Stopped (Stop, a click, a closed or refreshed tab): closing the events recorded the answer so far and
            # any call it stopped; stored now, so that a stopped call never looks like one still to be run.
            persistence.save_interrupted(page, saving_to, conversation)
            raise
        model_status.refresh(client)


class LiveTurn:
    """The render state of one streaming turn (its slots, the answer so far, the running tool's card), with one
    method per event type. Make it and show() every event inside the turn's assistant bubble: tool cards and the
    slots below them are added to that bubble as the events come."""

    def __init__(self, page: str, conversation: Conversation, transform: Callable[[str], str] | None,
                 decisions: Mapping[str, Decision] | None = None) -> None:
        self.page = page
        self.decisions = decisions  # the user's, on the calls this turn answers (kept if one asks a question)
        self.conversation = conversation
        self.transform = transform
        self.notices = st.container()
        self.thought_slot = st.empty()  # a reasoning model's thought, above the answer it leads to
        self.thought: _Thought | None = None
        self.answer_mark = st.container()  # after a tool result: that the words below are the model's
        self.body = st.empty()  # the answer being written
        self.text = ""  # the answer so far
        self.last_flush = 0.0  # when the answer or the call being written was last redrawn
        self.writing = st.empty()  # the call the model is writing, live, until its card takes over
        self.writing_call = False
        self.card: StatusContainer | None = None  # the running tool call's card
        self.card_name = ""
        self.card_started = 0.0
        self.after_tool = False  # the next answer follows a tool result: marked as the model's

    def show(self, event: TurnEvent) -> None:
        """Draw one event. A new event type is a type error here until it has a case."""
        match event:
            case ThinkingDelta():
                self.on_thinking(event)
            case TextDelta():
                self.on_text(event)
            case Waiting():
                self.on_waiting(event)
            case ToolCallWriting():
                self.on_call_writing(event)
            case Notice():
                self.on_notice(event)
            case AnswerDone():
                self.on_answer_done(event)
            case ToolCallStarted():
                self.on_call_started(event)
            case ToolCallFinished():
                self.on_call_finished(event)
            case ApprovalNeeded():
                self.on_approval_needed(event)
            case QuestionAsked():
                self.on_question(event)
            case TurnError():
                self.on_error(event)
            case TurnDone():
                self.on_done(event)
            case _:
                assert_never(event)

    def on_thinking(self, event: ThinkingDelta) -> None:
        self.thought = self.thought or _Thought(self.thought_slot)
        self.thought.add(event.text)

    def on_text(self, event: TextDelta) -> None:
        if self.thought is not None:
            self.thought.answer_started()
        if self.after_tool:
            with self.answer_mark:
                model_answer_mark()
            self.after_tool = False
        self.text += event.text
        if self._flush_due():
            self.body.markdown(text_markdown(self.text, streaming=True))

    def on_waiting(self, event: Waiting) -> None:
        """A beat with nothing new: the running tool's card counts the seconds, an empty answer says it waits."""
        if self.card is not None:
            running_for = time.monotonic() - self.card_started
            self.card.update(label=safe_label(f"Running {self.card_name}... {running_for:.1f} s"))
        elif not self.writing_call:
            self.body.markdown(text_markdown(self.text, streaming=True) or ":grey[waiting for the model...]")

    def on_call_writing(self, event: ToolCallWriting) -> None:
        if not self.writing_call and not self.text:
            self.body.empty()  # no "waiting" above a call that is being written
        self.writing_call = True
        if self._flush_due():
            _show_call_being_written(self.writing, event)

    def on_notice(self, event: Notice) -> None:
        self.notices.caption(safe_markdown(event.text))

    def on_answer_done(self, event: AnswerDone) -> None:
        """One generation finished (and is saved now): its final text replaces the streamed one, its thought
        collapses above it and its metrics go below."""
        persistence.save(self.page, self.conversation)  # each answer is stored as soon as it is complete
        if self.thought is not None:
            self.thought.done(event.message)
            self.thought = None
        self.writing.empty()
        self.writing_call = False
        content = event.message.content or ""
        self.body.markdown(text_markdown(self.transform(content) if self.transform else content))
        if not event.message.error and (event.message.content or event.message.tool_calls):
            metrics_caption(event.message)
        self.text = ""

    def on_call_started(self, event: ToolCallStarted) -> None:
        self.card_name, self.card_started = event.call.name, time.monotonic()
        self.card = st.status(safe_label(f"Running {self.card_name}..."), state="running", expanded=True)
        with self.card:
            arguments(event.call)

    def on_call_finished(self, event: ToolCallFinished) -> None:
        """The card shows the result and collapses; what follows (the next answer) is drawn below it."""
        persistence.save(self.page, self.conversation)
        assert self.card is not None
        with self.card:
            result_body(event.message)
        self.card.update(label=card_label(event.call, event.message), state=card_state(event.message),
                         expanded=False)
        tool_images(event.message)
        self.card = None
        self.thought_slot = st.empty()  # the next answer (and its thought) goes below the card
        self.answer_mark = st.container()
        self.after_tool = True
        self.body = st.empty()
        self.writing = st.empty()

    def on_approval_needed(self, event: ApprovalNeeded) -> None:
        """The turn pauses here; the page is drawn again at once, with the calls' cards
        (app/frontends/streamlit/approvals.py)."""
        names = ", ".join(dict.fromkeys(call.name for call in event.calls))
        st.caption(safe_markdown(f":material/front_hand: Waiting for you to decide on the call to {names}..."))

    def on_question(self, event: QuestionAsked) -> None:
        """The running call asks the user something: the turn pauses with the call running, kept in this session;
        the page is drawn again at once with the question as a form (app/frontends/streamlit/question_forms.py)."""
        questions.remember(self.page, event.call.id, event.running, self.decisions)
        if self.card is not None:
            self.card.update(label=safe_label(f"{event.call.name} asks you something..."), state="running")

    def on_error(self, event: TurnError) -> None:
        st.error(safe_markdown(event.message), icon=":material/error:")

    def on_done(self, event: TurnDone) -> None:
        pass  # every answer and tool result is drawn (and saved) already

    def _flush_due(self) -> bool:
        """Whether enough time has passed to redraw what is being written; if so, it counts as redrawn now."""
        now = time.monotonic()
        if now - self.last_flush < _FLUSH_EVERY_S:
            return False
        self.last_flush = now
        return True


class _Thought:
    """A thought as it streams: a collapsed section whose title counts the seconds, updated at most 20 times a
    second; once the answer is done, the same section as the history shows it."""

    def __init__(self, slot: DeltaGenerator) -> None:
        self.started = time.monotonic()
        self.slot = slot
        self.status = slot.status("Thinking...", state="running", expanded=False)
        with self.status:
            self.body = st.empty()
        self.text = ""
        self.last_flush = 0.0
        self.thinking = True

    def add(self, text: str) -> None:
        self.text += text
        if time.monotonic() - self.last_flush >= _FLUSH_EVERY_S:
            self.body.markdown(safe_markdown(self.text, streaming=True))
            self.status.update(label=f"Thinking... {time.monotonic() - self.started:.0f} s")
            self.last_flush = time.monotonic()

    def answer_started(self) -> None:
        if self.thinking:
            self.thinking = False
            self.body.markdown(safe_markdown(self.text, streaming=True))
            self.status.update(label=f"Thought for {time.monotonic() - self.started:.1f} s", state="complete")

    def done(self, message: Message) -> None:
        with self.slot.expander(thought_label(message), icon=THOUGHT_ICON):
            st.markdown(safe_markdown(message.thinking or self.text))


def _show_call_being_written(slot: DeltaGenerator, call: ToolCallWriting) -> None:
    """A code tool's program as code (its JSON string decoded as far as it goes), any other call as its JSON."""
    with slot.container():
        st.caption(safe_markdown(f"Writing a call to {call.name or 'a tool'}..."))
        code = _partial_json_string(call.arguments, '{"code": "')
        if code is not None:
            st.code(code, language="python", wrap_lines=True)
        else:
            st.code(call.arguments, language="json", wrap_lines=True)


def _partial_json_string(arguments: str, opening: str) -> str | None:
    """The value of an unfinished one-string JSON object such as {"code": "print(1)\\n..., or None."""
    if not arguments.startswith(opening):
        return None
    body = arguments[len(opening) :].removesuffix('"}')
    for cut in range(6):  # an escape sequence may be cut off at the end (\\, \\u12a)
        try:
            return json.loads('"' + body[: len(body) - cut] + '"')
        except json.JSONDecodeError:
            continue
    return None
