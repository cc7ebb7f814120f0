"""Tools page: the model may call the tools enabled in the sidebar; each call shows as a card with its result."""

from __future__ import annotations

import streamlit as st

from app.ui import sidebar, state, tool_settings
from app.ui.chat_page import answer_if_asked, show_model
from app.ui.client_cache import load_client
from app.ui.messages import render_history

PAGE = "tools"

settings = sidebar.current()
conversation = state.conversation(PAGE)

st.title("Tools")
client = load_client(settings.model)
tools = tool_settings.render(client, PAGE)
if client is not None:
    native = ("the model's chat template" if client.capabilities.native_tools
              else "a system prompt (the chat template knows no tools)")
    show_model(client, f" · tools described through {native}")

render_history(conversation)

prompt = st.chat_input("Ask something a tool can help with, e.g. the weather in Paris", submit_mode="stop",
                       key="tools_input")
answer_if_asked(PAGE, prompt, conversation, client, settings, tools)
