"""The browser's return from an MCP server's sign-in: the authorization server sends it to the app's public URL
(DEMO_PUBLIC_URL) with `code` and `state` (or `error`) in the query. `finish_from_url`, run before any page draws,
hands them to the sign-in waiting for them (app/mcp_client/oauth.py), whichever tab or session started it, and says
how it went; the parameters leave the URL either way, so a reload does not send them twice."""

from __future__ import annotations

import streamlit as st

from app.frontends.streamlit import mcp_settings
from app.mcp_client.oauth import SignInError

_ANSWER = ("code", "state", "error", "error_description", "iss")


def finish_from_url() -> None:
    """If the URL carries an authorization server's answer, complete that sign-in and show the outcome."""
    params = st.query_params
    if "state" not in params or not ("code" in params or "error" in params):
        return
    code, state, error, _, iss = (params.get(key) or "" for key in _ANSWER)
    for key in _ANSWER:
        params.pop(key, None)
    try:
        with st.spinner("Finishing the sign-in..."):
            name = mcp_settings.manager().complete_sign_in(mcp_settings.account(), code, state, error, iss or None)
    except SignInError as exc:
        st.error(mcp_settings.plain(f"Sign-in not completed: {exc}"), icon=":material/no_accounts:")
        return
    st.success(mcp_settings.plain(f"Signed in to {name}. Its tools are now in the tab where you clicked "
                                  "Sign in; you can close this one."), icon=":material/how_to_reg:")
