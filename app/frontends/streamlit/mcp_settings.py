"""MCP servers in the Tools sidebar: their tools for this session, each server's status, and Streamable HTTP
servers a user adds for their own browser session (stdio servers, which run commands on this machine, only come
from the administrator's mcp.json; added URLs go through the SSRF guard). A server that needs sign-in shows a
"Sign in to ..." link; the browser comes back to app/frontends/streamlit/mcp_sign_in.py, and this tab looks every few
seconds until the sign-in has ended. A sign-in is kept for the user's app account (the app's login) or, without one, for
this browser session alone (`account()`)."""

from __future__ import annotations

import re
import uuid
import weakref
from collections.abc import Iterable

import streamlit as st

from app.config import McpSettings
from app.frontends.streamlit import persistence
from app.mcp_client import HttpServer, McpConfigError, McpManager, ServerConnection, bearer_server, mcp_registry
from app.mcp_client.server_config import policy_defaults as config_policy_defaults
from app.storage.errors import StorageError
from app.tools.policy import PolicyDefaults
from app.tools.tool_registry import ToolError, ToolRegistry

_SESSION_KEY = "_mcp_session_servers"
_NOTICE_KEY = "mcp.notice"
_NEW = ("mcp.new.name", "mcp.new.url", "mcp.new.token")  # the add form's fields
_ICONS = {"connected": ":material/check_circle:", "error": ":material/error:", "idle": ":material/pending:",
          "sign-in": ":material/login:"}
_SIGN_IN_POLL_S = 2.0  # while a sign-in is in progress (in another tab), how often this tab looks whether it ended
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+!|~-])")


@st.cache_resource(show_spinner=False, on_release=McpManager.close)
def _manager(settings: McpSettings) -> McpManager:
    return McpManager(settings)  # one per process: stdio servers start once, not per session or rerun


def manager() -> McpManager:
    return _manager(McpSettings.from_env())


def account() -> str | None:
    """The app account whose MCP sign-ins are kept (encrypted, in the database) from one visit to the next; None
    where there is none (no login configured, or a visitor who has not logged in): then a sign-in is this browser
    session's alone. Not persistence.owner(), whose one local user, without a login, is every browser's."""
    return persistence.owner() if persistence.authentication_configured() else None


class _SessionServers:
    """The servers this browser session added. Their specs are kept so that a new manager (caches cleared) gets
    them again; the manager forgets them (and disconnects) when Streamlit drops the session."""

    def __init__(self) -> None:
        self.owner = uuid.uuid4().hex
        self.specs: dict[str, HttpServer] = {}
        self._registered_with: list[weakref.ref[McpManager]] = []
        weakref.finalize(self, _release, self._registered_with, self.owner)

    def connections(self, mcp: McpManager) -> list[ServerConnection]:
        """The configured servers and this session's own, registered with `mcp` first if they are not yet."""
        if not self._registered_with or self._registered_with[0]() is not mcp:
            self._registered_with[:] = [weakref.ref(mcp)]
            for name, spec in list(self.specs.items()):
                try:
                    mcp.add_server(self.owner, name, spec, user=account())
                except McpConfigError:  # e.g. DEMO_BROWSER_ALLOW no longer allows it
                    del self.specs[name]
        return mcp.connections(self.owner)


def _release(registered_with: list[weakref.ref[McpManager]], owner: str) -> None:
    mcp = registered_with[0]() if registered_with else None
    if mcp is not None:
        mcp.release(owner)


def _session() -> _SessionServers:
    if _SESSION_KEY not in st.session_state:
        st.session_state[_SESSION_KEY] = _SessionServers()
    return st.session_state[_SESSION_KEY]


def connections() -> list[ServerConnection]:
    """This session's servers: the configured ones and those it added (not connected from here)."""
    return _session().connections(manager())


def tools(taken: Iterable[str]) -> ToolRegistry:
    """This session's MCP tools (configured servers and its own), named not to clash with `taken`; connects and
    lists where needed, so a server that died is restarted here."""
    mcp = manager()
    connections = _session().connections(mcp)
    if not connections:
        return ToolRegistry()
    if all(connection.connected for connection in connections):
        mcp.refresh(connections)
    else:
        with st.spinner("Connecting to MCP servers..."):
            mcp.refresh(connections)
    return mcp_registry(mcp, connections, taken)


def policy_defaults() -> PolicyDefaults:
    """The run policies mcp.json sets for its servers' tools (app/tools/policy.py); none for servers users add."""
    return config_policy_defaults({c.name: c.spec for c in manager().connections() if not c.owner})


def render() -> None:
    """The "MCP servers" expander: statuses, Remove for the session's own servers, and the form to add one."""
    mcp = manager()
    session = _session()
    notice = st.session_state.pop(_NOTICE_KEY, None)
    with st.expander("MCP servers", expanded=bool(mcp.config_error or notice)):
        if mcp.config_error:
            st.error(plain(mcp.config_error), icon=":material/error:")
        connections = session.connections(mcp)
        kept = ("kept, encrypted, for your account alone" if account() is not None
                else "kept for this browser tab alone, until you close or reload it")
        for connection in connections:
            status = connection.status()
            whose = "added by you" if status.owner else "mcp.json"
            st.markdown(f"{_ICONS[status.state]} **{plain(status.name)}** · {status.kind} · {whose}")
            st.caption(plain(status.message))
            if status.sign_in_url:  # opens in a new tab; the authorization server sends it back to the app
                st.link_button(f"Sign in to {status.name}", status.sign_in_url, icon=":material/login:",
                               help=f"Opens the server's sign-in page. Your sign-in is {kept}.")
            if status.owner:
                st.button("Remove", key=f"mcp.remove.{status.name}", on_click=_remove, args=(status.name,))
            if status.signed_in:
                st.button("Sign out", key=f"mcp.sign_out.{status.name}", on_click=_sign_out, args=(status.name,),
                          help=f"Forget your sign-in to this server ({kept}).")
        if any(connection.status().state == "sign-in" for connection in connections):
            _await_sign_in()
        if not connections:
            st.caption("No servers. An administrator lists them in mcp.json; you can add a Streamable HTTP server "
                       "for this session below.")
        if notice:
            kind, text = notice
            (st.success if kind == "success" else st.warning if kind == "warning" else st.error)(plain(text))
        with st.form("mcp_add_server", border=False):
            st.text_input("Server name", key=_NEW[0], placeholder="docs", max_chars=40)
            st.text_input("URL (Streamable HTTP)", key=_NEW[1], placeholder="https://example.com/mcp")
            st.text_input("Bearer token (optional)", key=_NEW[2], type="password",
                          help="Sent as `Authorization: Bearer ...` to this server only; kept for this session only.")
            st.form_submit_button("Add server", key="mcp.new.add", on_click=_add)


def _add() -> None:
    state = st.session_state
    name, url, token = (str(state.get(key) or "").strip() for key in _NEW)
    mcp = manager()
    session = _session()
    session.connections(mcp)  # registered with this manager before adding to it
    try:
        if not name or not url:
            raise McpConfigError("give the server a name and its URL.")
        spec = bearer_server(url, token)
        connection = mcp.add_server(session.owner, name, spec, user=account())
    except McpConfigError as exc:
        state[_NOTICE_KEY] = ("error", f"Not added: {exc}")
        return
    session.specs[name] = spec
    mcp.refresh([connection])
    status = connection.status()
    state[_NOTICE_KEY] = ("success" if status.state == "connected" else "warning", f"Added {name}: {status.message}.")
    for key in _NEW:
        state[key] = ""


@st.fragment(run_every=_SIGN_IN_POLL_S)
def _await_sign_in() -> None:
    """While one of this session's servers waits for a sign-in (finished in the tab the authorization server sends
    back to the app), redraw the whole page once none does: its tools then appear."""
    if not any(connection.status().state == "sign-in" for connection in _session().connections(manager())):
        st.rerun()


def _sign_out(name: str) -> None:
    try:
        manager().sign_out(_session().owner, name)
    except (ToolError, StorageError) as exc:
        st.session_state[_NOTICE_KEY] = ("error", f"Not signed out: {exc}")


def _remove(name: str) -> None:
    session = _session()
    manager().remove_server(session.owner, name)
    session.specs.pop(name, None)


def plain(text: str) -> str:
    """`text` shown as it is: a server's message must not become links or pictures in the user's browser."""
    return _MARKDOWN.sub(r"\\\1", text)
