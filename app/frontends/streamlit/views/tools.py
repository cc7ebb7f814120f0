"""Tools page: the model may call the tools enabled in the sidebar; each call shows as a card with its result."""

from __future__ import annotations

import streamlit as st

from app.agent.loop import warm_turn
from app.frontends.streamlit import approvals, mcp_library, sidebar, state, tool_settings, voice_input, welcome
from app.frontends.streamlit.chat_page import answer_if_asked, show_model
from app.frontends.streamlit.client_cache import load_client
from app.frontends.streamlit.messages import render_history

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
    warm_turn(client, settings.params, settings.system_prompt, tools)  # the tools' schemas read before the first turn

# Pinned to the bottom wherever it is called: called first, so that the welcome knows whether a message came.
# Open while an answer is written, as on the Chat page (views/chat.py says why).
box = approvals.message_box(welcome.PLACEHOLDERS[PAGE], conversation)
prompt = st.chat_input(voice_input.placeholder(box.placeholder), disabled=box.disabled, key="tools_input",
                       accept_audio=True)
prompt = voice_input.take(PAGE, prompt)  # a recording becomes a draft to correct (views/chat.py)
prompt = mcp_library.render(PAGE, "tools_input", prompt)  # servers' prompts and resources; attaches the chosen ones
conversation_box = render_history(PAGE, conversation, tools=tools)
with conversation_box:  # the new message and the answer go on in it
    voice_input.render_draft(PAGE, disabled=box.disabled)
    welcome.render(PAGE, conversation, tools, submitted=prompt)
    answer_if_asked(PAGE, prompt, conversation, client, settings, tools)
