"""Which part of a long conversation the page draws, and which messages show their whole row of actions.

Streamlit runs the page script top to bottom on every interaction, so every message drawn costs something on every
click, send and streamed answer (measured: a 300-turn conversation took 4 s per run, 95% of it in the actions
rows). The page therefore draws the most recent messages at once and earlier ones on demand ("Show earlier"), and
the full row of actions (Copy, Edit, Regenerate) only where it is needed: under the last question and the last
answer, where versions exist, and where the user opened it with the message's one light "more" button. The model
always sees the whole branch: this is about drawing only. Everything lives in st.session_state, per page and per
conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from app.domain.conversation import Conversation

# Messages drawn at first, and added by each "Show earlier": each costs about 3 ms on every run (bench/page_speed.py).
PAGE_MESSAGES = 20


@dataclass
class _Window:
    conversation_id: str | None
    shown: int = PAGE_MESSAGES
    opened: set[int] = field(default_factory=set)  # messages whose actions the user opened


def _window(page: str, conversation_id: str | None) -> _Window:
    key = f"history_window/{page}"
    window = st.session_state.get(key)
    if not isinstance(window, _Window) or window.conversation_id != conversation_id:
        window = st.session_state[key] = _Window(conversation_id)  # another conversation: its own window
    return window


def first_drawn(page: str, conversation_id: str | None, conversation: Conversation) -> int:
    """The index of the first message to draw: about the last `shown` messages, moved back to the start of the
    bubble it falls in (an answer's tool calls and results are drawn together)."""
    messages = conversation.messages
    start = max(0, len(messages) - _window(page, conversation_id).shown)
    while 0 < start < len(messages) and messages[start].role in ("assistant", "tool") \
            and messages[start - 1].role in ("assistant", "tool"):
        start -= 1
    return start


def show_earlier(page: str, conversation_id: str | None, hidden: int) -> None:
    """Above the first drawn message: how many are not drawn, and buttons to draw more or all of them."""
    more = min(hidden, PAGE_MESSAGES)
    with st.container(horizontal=True, gap="small", key=f"show_earlier/{page}"):
        st.button(f"Show {more} earlier messages", key=f"show_earlier_more/{page}", icon=":material/expand_less:",
                  type="tertiary", on_click=_show_more, args=(page, conversation_id, PAGE_MESSAGES))
        if hidden > more:
            st.button(f"Show all {hidden}", key=f"show_earlier_all/{page}", type="tertiary",
                      on_click=_show_more, args=(page, conversation_id, hidden))


def _show_more(page: str, conversation_id: str | None, count: int) -> None:
    _window(page, conversation_id).shown += count


def show_message(page: str, conversation_id: str | None, conversation: Conversation, index: int) -> None:
    """Draw enough of the conversation that message `index` is on the page (a search hit in an earlier message)."""
    window = _window(page, conversation_id)
    window.shown = max(window.shown, len(conversation.messages) - index)


def actions_open(page: str, conversation_id: str | None, conversation: Conversation, index: int,
                 last_bubble: bool) -> bool:
    """Whether message `index` (a question, or the first message of an answer) shows its whole row of actions."""
    if last_bubble or index == conversation.last_user_index() or conversation.version_count(index)[1] > 1:
        return True
    return index in _window(page, conversation_id).opened


def more_button(page: str, conversation_id: str | None, index: int) -> None:
    """The one light control of a message whose actions are not drawn: a click draws them."""
    st.button("", key=f"more/{page}/{index}", icon=":material/more_horiz:", type="tertiary",
              help="Copy, edit, regenerate, preview or rate", on_click=_open_actions,
              args=(page, conversation_id, index))


def _open_actions(page: str, conversation_id: str | None, index: int) -> None:
    _window(page, conversation_id).opened.add(index)
