"""Chat page: a plain conversation with the selected model."""

from __future__ import annotations

import streamlit as st

from app.agent.attachments import ATTACHMENT_TYPES
from app.frontends.streamlit import knowledge_page, sidebar, state, voice_input, welcome
from app.frontends.streamlit.chat_page import answer_if_asked, show_model
from app.frontends.streamlit.client_cache import load_client
from app.frontends.streamlit.messages import render_history

PAGE = "chat"

settings = sidebar.current()
conversation = state.conversation(PAGE)

with sidebar.page_section():
    knowledge_page.choose_in_sidebar(conversation)

st.title("Chat")
client = load_client(settings.model)
show_model(client)

# Pinned to the bottom wherever it is called: called first, so that the welcome knows whether a message came.
# Open while an answer is written: a message sent then stops that answer (kept, marked Stopped) and is answered.
# Not submit_mode="disable": Streamlit 1.67 can leave that box disabled after the run has ended, when a timer
# fragment (the model status) finishes just after the run, until some other click reruns the page.
# The microphone records; voice_input transcribes on this machine into a draft to correct, then send.
prompt = st.chat_input(voice_input.placeholder(welcome.PLACEHOLDERS[PAGE]), key="chat_input", accept_file="multiple",
                       file_type=ATTACHMENT_TYPES, accept_audio=True)
prompt = voice_input.take(PAGE, prompt)
conversation_box = render_history(PAGE, conversation)
with conversation_box:  # the new message and the answer go on in it
    voice_input.render_draft(PAGE)
    welcome.render(PAGE, conversation, submitted=prompt)
    answer_if_asked(PAGE, prompt, conversation, client, settings)
