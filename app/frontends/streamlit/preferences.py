"""The user's last settings (backend, system prompt, sampling, length, seed, thinking), kept in the project's
database for the signed-in (or the one local) user: a refresh or a new tab starts where they left off.

Restored into the widgets' session-state keys on a session's first run, before the widgets are drawn; saved at the
end of the sidebar's run whenever they differ from what was saved. A conversation's own settings (its system
prompt, its tool choice: app/frontends/streamlit/persistence.py) still come back with it when it is opened. A database
that cannot be reached costs this feature only: the settings start at their defaults and nothing is shown.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from app.frontends.streamlit import persistence
from app.storage import StorageError

log = logging.getLogger(__name__)
# Preference name -> the widget key that holds it (app/frontends/streamlit/sidebar.py,
# app/frontends/streamlit/sampling_settings.py).
KEYS = {
    "backend": "backend",
    "system_prompt": "system_prompt",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_new_tokens",
    "seed": "seed",
    "thinking": "thinking",
}
_RESTORED = "_preferences_restored"
_SAVED = "_preferences_saved"


def restore() -> None:
    """On the session's first run: the stored settings into the widgets' keys (a widget the user already set in
    this session is left alone)."""
    if st.session_state.get(_RESTORED):
        return
    st.session_state[_RESTORED] = True
    who = persistence.owner()
    if who is None:
        return
    try:
        stored = persistence.store().get_preferences(who)
    except StorageError:
        log.warning("The user's settings could not be read", exc_info=True)
        return
    for name, key in KEYS.items():
        if name in stored and key not in st.session_state:
            st.session_state[key] = stored[name]
    st.session_state[_SAVED] = _current()


def remember() -> None:
    """Store the settings if they changed since they were last stored."""
    who = persistence.owner()
    settings = _current()
    if who is None or settings == st.session_state.get(_SAVED):
        return
    try:
        persistence.store().set_preferences(who, settings)
    except StorageError:
        log.warning("The user's settings could not be saved", exc_info=True)
        return
    st.session_state[_SAVED] = settings


def _current() -> dict[str, Any]:
    return {name: st.session_state[key] for name, key in KEYS.items() if key in st.session_state}
