"""This browser session's comparison: a pane per target with its own conversation (every pane gets the same user
messages; the answers, tool calls and results are each pane's own), the turn that is running (its threads go on
across the page's reruns: a Stop click reruns the page, which goes on drawing the same turn), what each pane's
running turn has shown so far, and the blind order of the panes.

The running turn lives as long as the browser session: when the tab closes, reloads or loses its connection, every
target still answering is stopped at once (`current` binds the session to a session-scoped resource, which
Streamlit releases then), as a closed tab stops the Chat page's answer. Without it the targets' threads, which do not
belong to the page's script run, wrote their answers to the end for no one."""

from __future__ import annotations

import copy
import random
import threading
from dataclasses import dataclass, field

import streamlit as st

from app.agent.loop import (
    AnswerDone,
    ApprovalNeeded,
    Notice,
    QuestionAsked,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallWriting,
    TurnDone,
    TurnError,
    Waiting,
)
from app.compare.compare_run import Comparison, QueueItem, RunFinished
from app.compare.results import TargetResult
from app.compare.targets import Target
from app.domain.conversation import Conversation, Message

_KEY = "_compare_session"


@dataclass
class LivePane:
    """What a pane's running turn has shown so far, read off its events."""

    messages: list[Message] = field(default_factory=list)  # its finished answers and tool results
    text: str = ""  # the answer being written
    thinking: str = ""
    writing: str = ""  # the call being written: "name(arguments so far)"
    running_tool: str = ""
    notices: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    finished: bool = False
    version: int = 0  # counts the events applied: a drawing of an older version is out of date

    def apply(self, item: QueueItem) -> None:
        self.version += 1
        match item:
            case TextDelta(text=text):
                self.text += text
            case ThinkingDelta(text=text):
                self.thinking += text
            case ToolCallWriting(name=name, arguments=arguments):
                self.writing = f"{name}({arguments})"
            case AnswerDone(message=message):
                self.messages.append(message)
                self.text = self.thinking = self.writing = ""
            case ToolCallStarted(call=call):
                self.running_tool = call.name
            case ToolCallFinished(message=message):
                self.messages.append(message)
                self.running_tool = ""
            case Notice(text=text):
                self.notices.append(text)
            case TurnError(message=text):
                self.errors.append(text)
            case RunFinished():
                self.finished = True
            case ApprovalNeeded() | QuestionAsked() | Waiting() | TurnDone():
                pass


@dataclass
class Pane:
    target: Target
    conversation: Conversation = field(default_factory=Conversation)
    live: LivePane | None = None  # while its turn runs (and until the page has taken in its end)
    result: TargetResult | None = None  # its last turn's answer, figures and tool-call checks


@dataclass
class CompareSession:
    panes: list[Pane] = field(default_factory=list)
    comparison: Comparison | None = None
    collected: bool = True  # the comparison's end has been taken into the panes
    order: list[int] = field(default_factory=list)  # blind: the panes' indexes in the order shown
    blind: bool = False  # this turn's panes are shown as A, B... until the vote
    voted: str | None = None  # the verdict on the last turn
    prompt: str = ""  # the last user message, as a vote stores it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def running(self) -> bool:
        return self.comparison is not None and not self.collected

    def match(self, targets: list[Target]) -> None:
        """Follow the sidebar's targets. A changed target keeps its pane's conversation (a new temperature goes on
        from where the pane is); a different number of targets starts the comparison afresh."""
        if len(targets) != len(self.panes):
            self.panes = [Pane(target) for target in targets]
            self.order, self.voted, self.prompt = list(range(len(targets))), None, ""
            self.comparison, self.collected = None, True
        else:
            for pane, target in zip(self.panes, targets, strict=True):
                pane.target = target

    def start_turn(self, user: Message, blind: bool) -> list[Conversation]:
        """Add the user's message to every pane; the conversations to answer."""
        for pane in self.panes:
            pane.conversation.add(copy.deepcopy(user))
            pane.live, pane.result = LivePane(), None
        self.prompt, self.voted, self.blind = user.content, None, blind
        self.order = list(range(len(self.panes)))
        if blind:
            random.SystemRandom().shuffle(self.order)
        self.collected = False
        return [pane.conversation for pane in self.panes]

    def abandon_turn(self) -> None:
        """The turn start_turn began could not start: the panes as they were before it."""
        for pane in self.panes:
            if pane.conversation.messages and pane.conversation.messages[-1].role == "user":
                pane.conversation.messages.pop()
            pane.live = None
        self.collected = True

    def take_events(self, items: list[tuple[int, QueueItem]]) -> None:
        """Apply drained events to the panes' live state. The run that drains them need not be the one that draws
        them: a click starts a new run while the old one may still drain once before it stops, so the drawing
        follows each pane's `version`, not the events a run drained itself."""
        with self.lock:
            for index, item in items:
                live = self.panes[index].live
                if live is not None:
                    live.apply(item)

    def collect(self) -> None:
        """The turn is over: each pane's conversation becomes its run's, its result the run's."""
        assert self.comparison is not None
        for pane, run in zip(self.panes, self.comparison.runs, strict=True):
            if pane.live is not None:
                pane.live.apply(RunFinished(run.result))
            pane.conversation = copy.deepcopy(run.conversation)
            pane.result, pane.live = run.result, None
        self.collected = True

    def resumed(self, index: int) -> None:
        """Pane `index`'s waiting calls were decided: its turn goes on."""
        self.panes[index].live = LivePane()
        self.collected = False

    def stop(self) -> None:
        """Stop every target still answering (the browser session is gone)."""
        if self.comparison is not None:
            self.comparison.close()

    def clear(self) -> None:
        """A new comparison: the panes' conversations emptied (the targets stay)."""
        if self.comparison is not None:
            self.comparison.close()
        self.panes = [Pane(pane.target) for pane in self.panes]
        self.comparison, self.collected, self.voted, self.prompt = None, True, None, ""

    def letter(self, index: int) -> str:
        """The pane's letter in the order shown: A, B, C, D."""
        position = self.order.index(index) if index in self.order else index
        return "ABCD"[position]


def current() -> CompareSession:
    """This browser session's comparison, stopped when the session ends."""
    if _KEY not in st.session_state:
        st.session_state[_KEY] = CompareSession()
    compare: CompareSession = st.session_state[_KEY]
    _browser_session().compare = compare
    return compare


class _BrowserSession:
    """Which CompareSession to stop when the browser session ends."""

    compare: CompareSession | None = None

    def end(self) -> None:
        if self.compare is not None:
            self.compare.stop()


@st.cache_resource(scope="session", show_spinner=False, on_release=_BrowserSession.end)
def _browser_session() -> _BrowserSession:
    # One per browser session: Streamlit releases it when the session disconnects (a closed or reloaded tab) or
    # ends, and on_release stops the session's running targets.
    return _BrowserSession()
