"""This browser session's own tools (kernel, web sources, folder), kept in st.session_state."""

from __future__ import annotations

import streamlit as st

from app.tools.session import SessionTools

_KEY = "_session_tools"


def session_tools() -> SessionTools:
    if _KEY not in st.session_state:
        st.session_state[_KEY] = SessionTools()  # cleaned up when Streamlit drops the session (weakref.finalize)
    return st.session_state[_KEY]
