"""Questions a running tool asks the user mid-call (MCP's elicitation, form mode), and their answers.

Each running call has a QuestionChannel. The tool's side (app/mcp_client/connection.py, when a server asks) puts a
Question on it and waits for the Answer; the agent sees the question waiting (app/agent/loop.py QuestionAsked) and the
page shows it as a form (app/frontends/streamlit/question_forms.py), whose answer completes the future. While a question
waits, the call's time limit stands still: the user's thinking time is not the tool's.

The tool's code finds its call's channel with `current_channel()`: the registry sets it in the thread that runs the
tool (ToolRegistry.start).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

AnswerAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True)
class Question:
    """What a tool asks: a message and the fields of the answer (a flat JSON Schema object of strings, numbers,
    booleans and enums, as MCP's form mode allows), from `source` (e.g. "MCP server tickets")."""

    message: str
    schema: dict[str, Any]
    source: str = ""


@dataclass(frozen=True)
class Answer:
    """The user's answer: accept (with `content`, the form's values), decline, or cancel (dismissed, stopped)."""

    action: AnswerAction
    content: dict[str, Any] | None = None


@dataclass(eq=False)
class AskedQuestion:
    """A question waiting for its answer."""

    question: Question
    answer: concurrent.futures.Future[Answer] = field(default_factory=concurrent.futures.Future)
    asked_at: float = field(default_factory=time.monotonic)


class QuestionChannel:
    """One running call's questions, one at a time; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: AskedQuestion | None = None
        self._waited_s = 0.0  # answered questions' waiting time

    @property
    def pending(self) -> AskedQuestion | None:
        """The question waiting for an answer, if one does."""
        with self._lock:
            asked = self._pending
        return asked if asked is not None and not asked.answer.done() else None

    @property
    def waited_s(self) -> float:
        """How long the call has waited for the user so far, the question waiting now included."""
        with self._lock:
            ongoing = time.monotonic() - self._pending.asked_at if self._pending is not None else 0.0
            return self._waited_s + ongoing

    def ask(self, question: Question) -> AskedQuestion:
        """Put a question to the user; its `answer` future completes when they answer. A tool asks one question at
        a time: a second one while the first waits is a RuntimeError."""
        with self._lock:
            if self._pending is not None and not self._pending.answer.done():
                raise RuntimeError("a question is already waiting for the user's answer")
            asked = self._pending = AskedQuestion(question)
        asked.answer.add_done_callback(lambda _: self._answered(asked))
        return asked

    def cancel(self) -> None:
        """Answer the waiting question, if any, with cancel (the call was stopped or abandoned)."""
        asked = self.pending
        if asked is not None:
            answer(asked, Answer("cancel"))

    def _answered(self, asked: AskedQuestion) -> None:
        with self._lock:
            if self._pending is asked:
                self._waited_s += time.monotonic() - asked.asked_at
                self._pending = None


def answer(asked: AskedQuestion, given: Answer) -> bool:
    """Answer a question; False when it was answered already (or cancelled)."""
    try:
        asked.answer.set_result(given)
        return True
    except concurrent.futures.InvalidStateError:
        return False


_CURRENT: contextvars.ContextVar[QuestionChannel | None] = contextvars.ContextVar("tool_questions", default=None)


def current_channel() -> QuestionChannel | None:
    """The channel of the call this thread runs (None outside a tool call)."""
    return _CURRENT.get()


def bind(channel: QuestionChannel) -> None:
    """Make `channel` this thread's current one (the registry, in the thread that runs a call)."""
    _CURRENT.set(channel)
