"""Per-browser-session state: everything here lives in st.session_state, nothing at module level."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import streamlit as st

from app.agent.loop import Decision
from app.domain.conversation import Conversation
from app.tools.tool_registry import RunningCall

_PENDING_TURN = "_pending_turn"
_TURN_LOCK = "_turn_lock"
_PAGE_CHANGED = "_page_changed"
# How long a new run waits for the turn it interrupted to record what it wrote (it notices at its next draw,
# within a fraction of a second; a tool call that ignores its cancellation is abandoned after its own limit).
TURN_END_WAIT_S = 15.0
T = TypeVar("T")


def per_page(kind: str, page: str, make: Callable[[], T]) -> T:
    """This session's `kind` object for `page`, made on first use."""
    key = f"{kind}/{page}"
    if key not in st.session_state:
        st.session_state[key] = make()
    return st.session_state[key]


def replace_per_page(kind: str, page: str, value: T) -> T:
    st.session_state[f"{kind}/{page}"] = value
    return value


def conversation(page: str) -> Conversation:
    """Each page keeps its own conversation, so a tool demo does not pollute a plain chat."""
    return per_page("conversation", page, Conversation)


@dataclass(frozen=True)
class TurnRequest:
    """Answer the page's last user message on this run; `text_only`: without its pictures (the user chose that for
    a model that cannot see them); `tool`: the first generation must call this tool (an example prompt made for
    it, so that even a small model answers it with the tool)."""

    page: str
    text_only: bool = False
    tool: str | None = None
    # Go on with the turn whose tool calls wait for the user (app/agent/loop.py resume_turn), as decided: by call id;
    # `running`: its calls that run already (they asked the user a question, now answered).
    decisions: Mapping[str, Decision] | None = None
    running: Mapping[str, RunningCall] | None = None


def page_changed() -> None:
    """From a callback of a widget inside a fragment: what it did changes the page (another conversation, a new
    version), so the whole app must run again, not only the fragment. A callback cannot rerun the app itself; the
    fragment does, in `rerun_if_page_changed`."""
    st.session_state[_PAGE_CHANGED] = True


def rerun_if_page_changed() -> None:
    """At the top of a fragment: rerun the app if a callback said the page changed. A full run that is drawing
    the page anyway clears the mark first (`forget_page_change`)."""
    if st.session_state.pop(_PAGE_CHANGED, False):
        st.rerun()


def forget_page_change() -> None:
    st.session_state.pop(_PAGE_CHANGED, None)


def request_turn(page: str, text_only: bool = False, tool: str | None = None) -> None:
    """Ask the page to answer the conversation's last user message on this run (Regenerate, an edit, an
    example prompt)."""
    st.session_state[_PENDING_TURN] = TurnRequest(page, text_only, tool)


def request_resume(page: str, decisions: Mapping[str, Decision],
                   running: Mapping[str, RunningCall] | None = None) -> None:
    """Ask the page to go on with its waiting tool calls on this run, as the user decided
    (app/frontends/streamlit/approvals.py) or answered (app/frontends/streamlit/question_forms.py)."""
    st.session_state[_PENDING_TURN] = TurnRequest(page, decisions=dict(decisions), running=dict(running or {}))


def turn_requested(page: str) -> bool:
    request = st.session_state.get(_PENDING_TURN)
    return isinstance(request, TurnRequest) and request.page == page


def pop_turn_request(page: str) -> TurnRequest | None:
    request = st.session_state.get(_PENDING_TURN)
    if isinstance(request, TurnRequest) and request.page == page:
        del st.session_state[_PENDING_TURN]
        return request
    return None


def _turn_lock() -> threading.Lock:
    return per_page(_TURN_LOCK, "session", threading.Lock)


@contextmanager
def turn_running() -> Iterator[None]:
    """Held while a turn streams in this session (app/frontends/streamlit/live_turn.py)."""
    lock = _turn_lock()
    held = lock.acquire(timeout=TURN_END_WAIT_S)  # not held: an abandoned turn keeps it; this one goes on
    try:
        yield
    finally:
        if held:
            lock.release()


def wait_for_interrupted_turn() -> None:
    """At the start of a run: let a turn that this run interrupted finish recording what it wrote.

    Streamlit starts a new run at once when a widget is used while the script runs (its fastReruns); the old run
    stops at its next draw, and only then does the stopped turn close its event stream, which cancels generation
    and adds the answer so far, marked stopped, to the conversation. Without this wait the new run would draw the
    conversation without that answer (and save it so), and show it only a rerun later."""
    lock = _turn_lock()
    if lock.acquire(timeout=TURN_END_WAIT_S):
        lock.release()
