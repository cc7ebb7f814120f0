"""Chat page: a plain conversation with the selected model."""

from __future__ import annotations

import streamlit as st

from app.attachments import ATTACHMENT_TYPES
from app.ui import sidebar, state
from app.ui.chat_page import answer_if_asked, show_model
from app.ui.client_cache import load_client
from app.ui.messages import render_history

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
