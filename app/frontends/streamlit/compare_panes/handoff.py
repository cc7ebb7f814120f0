"""Continue with one: a pane's conversation taken into a normal conversation, saved in the history, and opened
with that target's model and settings in the sidebar. It opens on the Tools page when the pane called tools (its
tool cards come along), else on the Chat page."""

from __future__ import annotations

import copy
from dataclasses import asdict

import streamlit as st

from app.clients.generation_defaults import SAMPLING_FIELDS, defaults_for_settings
from app.frontends.streamlit import api_keys, persistence, sampling_settings, state
from app.frontends.streamlit.compare_panes.compare_session import Pane

_HANDOFF = "_compare_handoff"
PAGE_PATHS = {"chat": "frontends/streamlit/views/chat.py", "tools": "frontends/streamlit/views/tools.py"}


def destination(pane: Pane) -> str:
    called = any(message.tool_calls for message in pane.conversation.messages)
    return "tools" if called else "chat"


def continue_with(pane: Pane) -> None:
    """A button's callback: make the pane's conversation the destination page's, store it, set the sidebar to the
    target, and switch to that page on this run (`switch_if_asked`)."""
    page = destination(pane)
    conversation = state.conversation(page)
    persistence.start_new(page, conversation)  # the page's current conversation stays in the history
    conversation.messages[:] = copy.deepcopy(pane.conversation.messages)
    target = pane.target
    settings, params = target.settings, target.params
    st.session_state["backend"] = settings.backend
    for name in ("model_path", "api_base_url", "api_model"):
        st.session_state[f"settings.model.{name}"] = getattr(settings, name)
    api_keys.hold("settings.model.api_key", settings.api_base_url, settings.api_key)  # never sent to the browser
    params_values = asdict(params)
    sampling_settings.set_values(defaults_for_settings(settings),
                                 {name: params_values[name] for name in SAMPLING_FIELDS})
    st.session_state["max_new_tokens"] = min(params.max_new_tokens, 32768)
    st.session_state["seed"] = params.seed
    st.session_state["system_prompt"] = target.system_prompt
    persistence.save(page, conversation)
    st.session_state[_HANDOFF] = page


def switch_if_asked() -> None:
    """On the page's run after a "Continue" click: go to the conversation's page."""
    page = st.session_state.pop(_HANDOFF, None)
    if page in PAGE_PATHS:
        st.switch_page(PAGE_PATHS[page])
