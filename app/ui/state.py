"""Per-browser-session state: everything here lives in st.session_state, nothing at module level."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class TurnRequest:
    """Answer the page's last user message on this run; `text_only`: without its pictures (the user chose that for
    a model that cannot see them)."""

    page: str
    text_only: bool = False


def request_turn(page: str, text_only: bool = False) -> None:
    """Ask the page to answer the conversation's last user message on this run (Regenerate, Resend)."""
    st.session_state[_PENDING_TURN] = TurnRequest(page, text_only)


def pop_turn_request(page: str) -> TurnRequest | None:
    request = st.session_state.get(_PENDING_TURN)
    if isinstance(request, TurnRequest) and request.page == page:
        del st.session_state[_PENDING_TURN]
        return request
    return None
