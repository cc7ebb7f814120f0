"""Chat page: a plain conversation with the selected model."""

from __future__ import annotations

import streamlit as st

from app.conversation import Message
from app.ui import sidebar, state
from app.ui.chat_view import answer_error, render_history, render_message, stream_turn
from app.ui.client_cache import load_client

PAGE = "chat"

settings = sidebar.current()
conversation = state.conversation(PAGE)

st.title("Chat")
client = load_client(settings.model)
if client is not None:
    st.caption(client.describe())

render_history(conversation)

prompt = st.chat_input("Message the model", submit_mode="stop", key="chat_input")
wants_answer = state.pop_turn_request(PAGE)
if prompt and prompt.strip():
    render_message(conversation.add(Message(role="user", content=prompt.strip())))
    wants_answer = True

if wants_answer:
    if client is None:
        answer_error(conversation, "No model is loaded: fix the model settings in the sidebar, then press Regenerate.")
    else:
        stream_turn(client, conversation, settings)
    st.rerun()  # redraw once so the sidebar (drawn before this turn) reflects the new last message
