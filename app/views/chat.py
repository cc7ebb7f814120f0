"""Chat page: a plain conversation with the selected model."""

from __future__ import annotations

import streamlit as st

from app.ui import sidebar, state
from app.ui.chat_view import ATTACHMENT_TYPES, answer_if_asked, render_history, show_model
from app.ui.client_cache import load_client

PAGE = "chat"

settings = sidebar.current()
conversation = state.conversation(PAGE)

st.title("Chat")
client = load_client(settings.model)
show_model(client)

render_history(conversation)

prompt = st.chat_input("Message the model (you can attach pictures and documents)", submit_mode="stop",
                       key="chat_input", accept_file="multiple", file_type=ATTACHMENT_TYPES)
answer_if_asked(PAGE, prompt, conversation, client, settings)
