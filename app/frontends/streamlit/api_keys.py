"""API key fields that never send the server's keys to a browser.

A key from the server's side (DEMO_API_KEY, a Compare targets file) is the server's business: a widget's value
travels to the browser in the page's websocket frames, so such a key is never a widget's value. It is kept in
session state under a name no widget has (session state that no widget shows stays on the server), with the base
URL it was configured for, and used only for that URL: an empty field then means "the key the server has for this
URL". A user who points the field's URL elsewhere gets no key they did not type, so the server's key cannot be sent
to a server of their choosing. A key the user types is theirs and is shown to them as any field is.
"""

from __future__ import annotations

import streamlit as st

_HELD = "_api_keys_held"  # widget key -> (base URL, key): the server's keys, by the field they stand behind


def hold(widget_key: str, base_url: str, api_key: str) -> None:
    """Stand the server's `api_key` for `base_url` behind the field `widget_key`, and empty the field (call before
    the field is drawn). An empty key clears what was held."""
    held: dict[str, tuple[str, str]] = st.session_state.setdefault(_HELD, {})
    if api_key:
        held[widget_key] = (_normal(base_url), api_key)
    else:
        held.pop(widget_key, None)
    st.session_state[widget_key] = ""


def key_input(label: str, widget_key: str, base_url: str, *, disabled: bool = False) -> str:
    """The API key field for a server at `base_url`; returns the key to use: what the user typed, else the key the
    server holds for exactly this URL (`hold`), else ""."""
    held = st.session_state.get(_HELD, {}).get(widget_key)
    for_this_url = held is not None and held[0] == _normal(base_url)
    placeholder = "set by the server for this URL" if for_this_url else ""
    helps = ("Empty for servers without a key." if held is None else
             "The server has a key for its configured URL; it is used while this field is empty and the URL is "
             "that one, and never shown here.")
    typed = st.text_input(label, key=widget_key, type="password", disabled=disabled, placeholder=placeholder,
                          help=helps).strip()
    if typed:
        return typed
    return held[1] if held is not None and for_this_url else ""


def _normal(base_url: str) -> str:
    return base_url.strip().rstrip("/")
