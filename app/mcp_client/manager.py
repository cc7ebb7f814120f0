"""Every MCP server one app process talks to, held open on one asyncio event loop in a background thread.

The Streamlit front end keeps one manager per process (app/ui/mcp_settings.py); anything else (a test, another
front end) may make its own. Servers from mcp.json are shared by every browser session. A Streamable HTTP server a
user adds belongs to that user's session (its `owner`) and is offered to no one else; users cannot add stdio
servers, which would run commands on this machine. `close()`, also run at interpreter exit, stops everything.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from app.config import McpSettings
from app.mcp_client.config import SERVER_NAME, HttpServer, McpConfigError, ServerSpec, load_config
from app.mcp_client.connection import STOP_TIMEOUT_S, ServerConnection
from app.tools.net_guard import check_url
from app.tools.registry import ToolError

LIST_MAX_AGE_S = 30.0  # a tool listing older than this is fetched again when a page asks (servers change tools)
MAX_ADDED_PER_SESSION = 5

T = TypeVar("T")


class McpManager:
    def __init__(self, settings: McpSettings | None = None, servers: dict[str, ServerSpec] | None = None) -> None:
        """The servers of `settings.config_path` (or `servers`, given directly). A bad mcp.json does not raise: it
        leaves `config_error` set and no configured servers, so the rest of the app keeps working."""
        self.settings = settings or McpSettings.from_env()
        self.config_error = ""
        if servers is None:
            try:
                servers = load_config(self.settings.config_path)
            except McpConfigError as exc:
                servers, self.config_error = {}, str(exc)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client-loop", daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._configured = {name: ServerConnection(name, spec, self.settings) for name, spec in servers.items()}
        self._added: dict[tuple[str, str], ServerConnection] = {}  # (owner, name) -> connection
        self._closed = False
        atexit.register(self.close)

    def connections(self, owner: str = "") -> list[ServerConnection]:
        """The configured servers, then those `owner` added."""
        with self._lock:
            return [*self._configured.values(), *(c for (who, _), c in self._added.items() if owner and who == owner)]

    def add_server(self, owner: str, name: str, spec: HttpServer) -> ServerConnection:
        """A Streamable HTTP server for `owner` alone; its URL must pass the SSRF guard (local and private addresses
        only where DEMO_BROWSER_ALLOW allows them). McpConfigError says why one cannot be added."""
        if not isinstance(spec, HttpServer):  # never a command line from a web user
            raise McpConfigError("only Streamable HTTP servers can be added here; stdio servers come from mcp.json.")
        if not owner:
            raise ValueError("a server added at run time needs an owner")
        if not SERVER_NAME.fullmatch(name):
            raise McpConfigError(f"{name!r}: a server name may use letters, digits, _ and - (at most 40).")
        try:
            check_url(spec.url)
        except ToolError as exc:
            raise McpConfigError(str(exc)) from None
        with self._lock:
            if self._closed:
                raise McpConfigError("the MCP client is shut down.")
            if name in self._configured or (owner, name) in self._added:
                raise McpConfigError(f"there is already a server named {name!r}.")
            if sum(who == owner for who, _ in self._added) >= MAX_ADDED_PER_SESSION:
                raise McpConfigError(f"at most {MAX_ADDED_PER_SESSION} servers can be added in one session.")
            connection = ServerConnection(name, spec, self.settings, owner=owner, guard_url=True)
            self._added[(owner, name)] = connection
        return connection

    def remove_server(self, owner: str, name: str) -> None:
        with self._lock:
            connection = self._added.pop((owner, name), None)
        if connection is not None and not self._closed:
            asyncio.run_coroutine_threadsafe(connection.close(), self._loop)  # it stops in the background

    def release(self, owner: str) -> None:
        """Stop and forget every server `owner` added (the session ended)."""
        with self._lock:
            names = [name for who, name in self._added if who == owner]
        for name in names:
            self.remove_server(owner, name)

    def refresh(self, connections: Iterable[ServerConnection], max_age_s: float = LIST_MAX_AGE_S) -> None:
        """Connect what is not connected (unless it is backing off) and list tools again where the listing is older
        than `max_age_s`; all servers at once. Failures only show in each server's status."""
        connections = list(connections)
        if not connections or self._closed:
            return

        async def all_of_them() -> None:
            await asyncio.gather(*(connection.refresh(max_age_s) for connection in connections))

        try:
            self.submit(all_of_them()).result(timeout=self.settings.connect_timeout_s + STOP_TIMEOUT_S + 5)
        except (concurrent.futures.TimeoutError, ToolError):
            pass  # each connection keeps its own time and the statuses say which is slow; or we are shutting down

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coroutine` on the manager's loop; cancelling the future cancels it there."""
        if self._closed:
            coroutine.close()
            raise ToolError("the MCP client is shut down.")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        """Stop every server (stdio processes end) and the loop. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = [*self._configured.values(), *self._added.values()]
        atexit.unregister(self.close)

        async def close_all() -> None:
            await asyncio.gather(*(connection.close() for connection in connections), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(timeout=STOP_TIMEOUT_S + 2)
        except Exception:  # best effort: the process may be ending anyway
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
