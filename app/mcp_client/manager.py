"""Every MCP server one app process talks to, held open on one asyncio event loop in a background thread.

The Streamlit front end keeps one manager per process (app/frontends/streamlit/mcp_settings.py); anything else (a test,
another front end) may make its own. Servers from mcp.json are shared by every browser session. A Streamable HTTP server
a user adds belongs to that user's session (its `owner`) and is offered to no one else; users cannot add stdio
servers, which would run commands on this machine. `close()`, also run at interpreter exit, stops everything.

An added server without a bearer token may ask its user to sign in (app/mcp_client/oauth.py). With an app account
(the app's login) the sign-in and its tokens belong to that account and the server's URL, kept encrypted in the
database; without one, to the browser session that added the server, in memory, gone with it. `complete_sign_in`
takes the browser's answer, from whichever session it arrives in.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mcp import types
from mcp.client.auth import TokenStorage

from app.config import McpSettings
from app.mcp_client.connection import STOP_TIMEOUT_S, ServerConnection, describe
from app.mcp_client.oauth import DatabaseTokenStorage, NoTokenStorage, SessionTokenStorage, SignInError
from app.mcp_client.server_config import SERVER_NAME, HttpServer, McpConfigError, ServerSpec, load_config
from app.storage.database import open_database
from app.storage.mcp_tokens import McpTokenStore, SecretKeyError, cipher
from app.tools.net_guard import check_url
from app.tools.tool_registry import ToolError

_GRACE_S = 5.0  # waiting on the loop only backs up the connection's own limits, which say more
LIST_MAX_AGE_S = 30.0  # a tool listing older than this is fetched again when a page asks (servers change tools)
MAX_ADDED_PER_SESSION = 5

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741 (an item of a listing)


@dataclass(frozen=True)
class Listed(Generic[I]):
    """What the connected servers offer of one kind: (server, item) pairs, in the servers' order, and for each
    server whose listing failed a line saying why."""

    items: list[tuple[ServerConnection, I]]
    problems: list[str]


class McpManager:
    def __init__(self, settings: McpSettings | None = None, servers: dict[str, ServerSpec] | None = None,
                 tokens: McpTokenStore | None = None) -> None:
        """The servers of `settings.config_path` (or `servers`, given directly). A bad mcp.json does not raise: it
        leaves `config_error` set and no configured servers, so the rest of the app keeps working. `tokens`: where
        sign-ins are kept (default: the configured database, opened when a sign-in first needs it, with
        settings.secret_key)."""
        self.settings = settings or McpSettings.from_env()
        self.config_error = ""
        self._tokens = tokens
        self._tokens_lock = threading.Lock()
        self.sign_in_unavailable = ""  # why no app account can keep a sign-in (said when one asks; the rest works)
        if tokens is None:
            try:
                cipher(self.settings.secret_key)
            except SecretKeyError as exc:
                self.sign_in_unavailable = str(exc)
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

    def add_server(self, owner: str, name: str, spec: HttpServer, user: str | None = None) -> ServerConnection:
        """A Streamable HTTP server for `owner` (a browser session) alone; its URL must pass the SSRF guard (local
        and private addresses only where DEMO_BROWSER_ALLOW allows them). Without an Authorization header it may
        ask its user to sign in: `user` is their app account, whose sign-ins are kept in the database; None (no app
        login) keeps the sign-in for this connection, of `owner` alone. McpConfigError says why one cannot be
        added."""
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
            connection = ServerConnection(name, spec, self.settings, owner=owner, guard_url=True,
                                          tokens=self._token_storage(spec, user), user=user)
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

    def complete_sign_in(self, user: str | None, code: str, state: str, error: str = "", iss: str | None = None) -> str:
        """Hand the browser's answer from an authorization server (the `code`, `state`, `error` and `iss` query
        parameters it sent the browser back with) to the sign-in it belongs to, and wait until that server is
        connected. Returns the server's name; SignInError says why not (no sign-in in progress has this `state`,
        it is another user's, the server refused)."""

        async def deliver() -> tuple[str, str]:
            with self._lock:
                connections = [*self._configured.values(), *self._added.values()]
            found = next((c for c in connections if c.sign_in is not None and c.sign_in.matches(state)), None)
            if found is None or found.sign_in is None:
                raise SignInError("this sign-in answer belongs to no sign-in in progress (it was already used, is "
                                  "too old, or did not start here): use the Sign in button again.")
            if found.sign_in.user != user:
                raise SignInError("this sign-in was started by another user of the app: sign in from your own "
                                  "session.")
            return found.name, await found.sign_in.deliver(code, state, iss, error)

        wait_s = self.settings.connect_timeout_s + STOP_TIMEOUT_S
        try:
            name, failure = self.submit(deliver()).result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            raise SignInError(f"the server did not finish the sign-in within {wait_s:g} s.") from None
        except ToolError as exc:  # shutting down
            raise SignInError(str(exc)) from None
        if failure:
            raise SignInError(f"signing in to {name} did not succeed: {failure}.")
        return name

    def sign_out(self, owner: str, name: str) -> None:
        """Forget the sign-in of the server `owner` added as `name` (stored and in memory); it is disconnected."""
        with self._lock:
            connection = self._added.get((owner, name))
        if connection is not None:
            self.run(connection.sign_out(), STOP_TIMEOUT_S + _GRACE_S)

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

    # ----- prompts and resources (the pages call these; each waits on the loop, failures are ToolErrors) ---------

    def list_prompts(self, connections: Iterable[ServerConnection]) -> Listed[types.Prompt]:
        """The prompts of the connected servers among `connections` (others are not connected from here)."""
        return self._list(connections, lambda connection: connection.list_prompts())

    def list_resources(self, connections: Iterable[ServerConnection]) -> Listed[types.Resource]:
        return self._list(connections, lambda connection: connection.list_resources())

    def list_resource_templates(self, connections: Iterable[ServerConnection]) -> Listed[types.ResourceTemplate]:
        return self._list(connections, lambda connection: connection.list_resource_templates())

    def get_prompt(self, connection: ServerConnection, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
        return self.run(connection.get_prompt(name, arguments), self._call_wait_s)

    def read_resource(self, connection: ServerConnection, uri: str) -> types.ReadResourceResult:
        return self.run(connection.read_resource(uri), self._call_wait_s)

    def run(self, coroutine: Coroutine[Any, Any, T], wait_s: float) -> T:
        """Run `coroutine` on the loop and wait for it at most `wait_s` (the connection's own limits come first
        and say more); ToolError when it fails or that wait runs out."""
        future = self.submit(coroutine)
        try:
            return future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"the MCP server did not answer within {wait_s:g} s.") from None
        except concurrent.futures.CancelledError:
            raise ToolError("the request to the MCP server was cancelled.") from None

    @property
    def _call_wait_s(self) -> float:
        return self.settings.connect_timeout_s + self.settings.call_timeout_s + _GRACE_S

    def _list(self, connections: Iterable[ServerConnection],
              listing: Callable[[ServerConnection], Coroutine[Any, Any, tuple[I, ...]]]) -> Listed[I]:
        """One listing from every connected server at once; a server that fails is a problem line, not an error."""
        connected = [connection for connection in connections if connection.connected]
        if not connected or self._closed:
            return Listed([], [])

        async def all_of_them() -> list[tuple[I, ...] | BaseException]:
            return await asyncio.gather(*(listing(connection) for connection in connected), return_exceptions=True)

        try:
            found = self.run(all_of_them(), self.settings.connect_timeout_s * 2 + _GRACE_S)
        except ToolError as exc:
            return Listed([], [str(exc)])
        items: list[tuple[ServerConnection, I]] = []
        problems: list[str] = []
        for connection, result in zip(connected, found, strict=True):
            if isinstance(result, BaseException):
                problems.append(f"{connection.name}: {describe(result)}")
            else:
                items.extend((connection, item) for item in result)
        return Listed(items, problems)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `coroutine` on the manager's loop; cancelling the future cancels it there."""
        if self._closed:
            coroutine.close()
            raise ToolError("the MCP client is shut down.")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _token_storage(self, spec: HttpServer, user: str | None) -> TokenStorage | None:
        """Where `user`'s sign-in to `spec` is kept (None: in the connection, for its session alone); None when it
        needs none (the user gave a bearer token)."""
        if any(header.lower() == "authorization" for header in spec.headers):
            return None
        if user is None:  # no app account: the browser session's own, never another's (nor "the local user's")
            return SessionTokenStorage()
        if self.sign_in_unavailable:
            return NoTokenStorage(self.sign_in_unavailable)
        return DatabaseTokenStorage(self._token_store, user, spec.url)

    def _token_store(self) -> McpTokenStore:
        """The sign-ins' store, opened on first use (StorageError when the database cannot be opened)."""
        with self._tokens_lock:
            if self._tokens is None:
                self._tokens = McpTokenStore(open_database(), self.settings.secret_key)
            return self._tokens

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
