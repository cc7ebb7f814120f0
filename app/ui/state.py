"""Per-browser-session state: everything here lives in st.session_state, nothing at module level."""

from __future__ import annotations

import streamlit as st

from app.conversation import Conversation

_PENDING_TURN = "_pending_turn"


def conversation(page: str) -> Conversation:
    """Each page keeps its own conversation, so a tool demo does not pollute a plain chat."""
    key = f"conversation/{page}"
    if key not in st.session_state:
        st.session_state[key] = Conversation()
    return st.session_state[key]


def request_turn(page: str) -> None:
    """Ask the page to answer the conversation's last user message on this run (Regenerate, Resend)."""
    st.session_state[_PENDING_TURN] = page


def pop_turn_request(page: str) -> bool:
    if st.session_state.get(_PENDING_TURN) == page:
        del st.session_state[_PENDING_TURN]
        return True
    return False
