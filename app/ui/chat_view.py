"""Rendering a conversation and streaming one turn into it."""

from __future__ import annotations

import time
from contextlib import closing

import streamlit as st

from app.agent import Notice, TextDelta, TurnDone, TurnError, Waiting, run_turn
from app.clients.base import Client
from app.conversation import Conversation, Message
from app.ui.sidebar import SidebarState

_FLUSH_EVERY_S = 0.05  # re-render the growing answer at most 20 times a second


def render_message(message: Message) -> None:
    with st.chat_message(message.role):
        if message.content:
            st.markdown(message.content)
        if message.error:
            st.error(message.error, icon=":material/error:")
        if message.metrics is not None and message.role == "assistant" and not message.error:
            _metrics_caption(message)


def _metrics_caption(message: Message) -> None:
    assert message.metrics is not None
    summary = message.metrics.summary()
    if message.stopped:
        st.caption(f":orange[Stopped] · {summary}")
    else:
        st.caption(summary)


def render_history(conversation: Conversation) -> None:
    for message in conversation.messages:
        render_message(message)


def stream_turn(client: Client, conversation: Conversation, sidebar: SidebarState) -> None:
    """Stream an answer into a chat bubble.

    If the user presses Stop (or anything reruns the script), Streamlit raises inside a render call; closing the
    event stream then cancels generation and the agent keeps the partial answer, marked stopped. After Stop
    Streamlit refuses every further render call, so the partial text is drawn without a cursor that could stay
    behind, and the "Stopped" mark appears on the next rerun.
    """
    with st.chat_message("assistant"):
        notices = st.container()
        body = st.empty()
        text = ""
        last_flush = 0.0
        events = run_turn(client, conversation, sidebar.params, sidebar.system_prompt)
        with closing(events):
            for event in events:
                if isinstance(event, TextDelta):
                    text += event.text
                    now = time.monotonic()
                    if now - last_flush >= _FLUSH_EVERY_S:
                        body.markdown(text)
                        last_flush = now
                elif isinstance(event, Waiting):
                    body.markdown(":grey[waiting for the model...]")
                elif isinstance(event, Notice):
                    notices.caption(event.text)
                elif isinstance(event, TurnError):
                    body.markdown(text)
                    st.error(event.message, icon=":material/error:")
                elif isinstance(event, TurnDone):
                    body.markdown(event.message.content or text)
                    if not event.message.error:
                        _metrics_caption(event.message)


def answer_error(conversation: Conversation, reason: str) -> None:
    """Record and show that no answer could be produced, keeping the user's message for a later Regenerate."""
    message = conversation.add(Message(role="assistant", error=reason))
    render_message(message)
