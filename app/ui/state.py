"""Per-browser-session state: everything here lives in st.session_state, nothing at module level."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from app.conversation import Conversation

_PENDING_TURN = "_pending_turn"
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


def request_turn(page: str) -> None:
    """Ask the page to answer the conversation's last user message on this run (Regenerate, Resend)."""
    st.session_state[_PENDING_TURN] = page


def pop_turn_request(page: str) -> bool:
    if st.session_state.get(_PENDING_TURN) == page:
        del st.session_state[_PENDING_TURN]
        return True
    return False
