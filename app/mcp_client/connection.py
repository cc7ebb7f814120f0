"""One MCP server held open through the official SDK: a long-lived `mcp.Client` over a stdio subprocess or
Streamable HTTP, its tool listing, and tool calls, prompts and resources under time limits.

The coroutines run on the manager's event loop only. A connection is held by its own task (anyio needs a
transport entered and left in the same task) until it is dropped or the server goes away; the next use connects
again, which restarts a stdio server. Failed attempts back off (2 s, doubling, at most a minute) so that a server
that is down does not slow every page. Failures reach callers as ToolError (what the model reads) and the status
(what the sidebar shows).

A Streamable HTTP server given a token storage signs in when it answers 401 (app/mcp_client/oauth.py): while the
user is away at the authorization page the attempt waits (up to McpSettings.sign_in_timeout_s, not the connect
timeout) and the status is "sign-in" with the URL to open; callers meanwhile get a ToolError that says so.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TextIO, TypeVar

import anyio
import anyio.to_thread
import httpx2
from jsonschema import SchemaError
from mcp import Client, MCPError, StdioServerParameters, types
from mcp.client import Transport
from mcp.client.auth import OAuthFlowError, OAuthRegistrationError, OAuthTokenError, TokenStorage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from opentelemetry.context import Context
from pydantic import ValidationError

from app.config import McpSettings
from app.limits.schema_validation import SchemaValidator
from app.mcp_client.elicitation import Askers
from app.mcp_client.http_client import PinnedTransport, cap_body
from app.mcp_client.oauth import SignIn, SignInError
from app.mcp_client.server_config import HttpServer, ServerSpec, StdioServer
from app.telemetry import spans
from app.tools.net_guard import check_url
from app.tools.questions import QuestionChannel
from app.tools.tool_registry import ToolError

CLIENT_INFO = types.Implementation(name="composite-llm-demo", version="1.0")
FIRST_BACKOFF_S = 2.0
MAX_BACKOFF_S = 60.0
STOP_TIMEOUT_S = 8.0  # the SDK gives a stdio server 2 s after stdin closes, then SIGTERM, then SIGKILL
_SSE_READ_TIMEOUT_S = 300.0  # a Streamable HTTP server may keep a response stream open this long between events
_MAX_PAGES = 100  # of a tool listing: a server that paginates forever cannot hang the app
MAX_LISTED = 1000  # prompts, resources or templates of one server: more would only clutter a list no one reads
LISTING_MAX_AGE_S = 30.0  # a prompt or resource listing older than this is fetched again
# Errors that mean the transport itself broke (as opposed to the server refusing one request).
_BROKEN = (httpx2.HTTPError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream,
           BaseExceptionGroup)
T = TypeVar("T")


@dataclass(frozen=True)
class ServerStatus:
    """What the sidebar shows about one server."""

    name: str
    kind: Literal["stdio", "http"]
    state: Literal["connected", "error", "idle", "sign-in"]
    tool_count: int = 0
    message: str = ""
    owner: str = ""  # "": configured by the administrator; else the browser session that added it
    sign_in_url: str = ""  # state "sign-in": the authorization page the user opens to sign in
    signed_in: bool = False  # the user's sign-in to this server is kept (they may sign out)


@dataclass(eq=False)
class _Link:
    """One connection attempt: the SDK client once connected, and the task holding it open until `done`."""

    done: anyio.Event
    client: Client | None = None
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    scope: anyio.CancelScope | None = None  # the connect deadline, lifted while the user signs in
    ready: asyncio.Future[None] | None = None  # what `_ensure` awaits: connected, failed, or waiting for sign-in


class ServerConnection:
    def __init__(self, name: str, spec: ServerSpec, settings: McpSettings, *, owner: str = "",
                 guard_url: bool = False, tokens: TokenStorage | None = None, user: str | None = None) -> None:
        """`guard_url`: check the URL with the SSRF guard before every connection, and every request of a sign-in
        (servers users add). `tokens`: where `user`'s sign-in to this (Streamable HTTP) server is kept; given, the
        server may ask the user to sign in."""
        self.name = name
        self.spec = spec
        self.settings = settings
        self.owner = owner
        self.guard_url = guard_url
        self.sign_in: SignIn | None = None
        if tokens is not None and isinstance(spec, HttpServer):
            self.sign_in = SignIn(spec.url, user, settings, tokens, self._awaiting_user, self._user_back)
        self._lock = asyncio.Lock()  # one connection attempt at a time
        self._link: _Link | None = None
        self._tools: tuple[types.Tool, ...] = ()
        self._listings: dict[str, tuple[_Link, float, tuple[Any, ...]]] = {}  # kind -> (on which link, when, items)
        self._listed_at = -math.inf
        self._error = ""
        self._failures = 0
        self._retry_at = 0.0
        self._refused: int | None = None  # HTTP 401/403 seen while connecting: the token is the likely cause
        self._closed = False
        self._askers = Askers(f"MCP server {name}")  # the calls in flight that may ask the user something

    @property
    def kind(self) -> Literal["stdio", "http"]:
        return "stdio" if isinstance(self.spec, StdioServer) else "http"

    @property
    def _again(self) -> str:
        return "restarted" if self.kind == "stdio" else "reconnected"

    @property
    def connected(self) -> bool:
        link = self._link
        return link is not None and link.client is not None

    @property
    def protocol_version(self) -> str | None:
        """The MCP version agreed with the server, while connected."""
        link = self._link
        try:
            return link.client.protocol_version if link is not None and link.client is not None else None
        except RuntimeError:  # the session ended under us (the server exited): no version, and no crash
            return None

    @property
    def tools(self) -> tuple[types.Tool, ...]:
        """The tools of the last listing while connected; none otherwise."""
        return self._tools if self.connected else ()

    def status(self) -> ServerStatus:
        pending = self.sign_in.pending if self.sign_in is not None else None
        if pending is not None and not pending.answer.done():
            return ServerStatus(self.name, self.kind, "sign-in", 0, "needs you to sign in", self.owner, pending.url)
        if pending is not None and not self.connected:
            return ServerStatus(self.name, self.kind, "idle", 0, "finishing the sign-in", self.owner)
        if self.connected:
            count = len(self._tools)
            return ServerStatus(self.name, self.kind, "connected", count,
                                f"connected · {count} tool{'s' if count != 1 else ''}", self.owner,
                                signed_in=self.sign_in is not None and self.sign_in.signed_in)
        if self._error:
            return ServerStatus(self.name, self.kind, "error", 0, self._error, self.owner)
        return ServerStatus(self.name, self.kind, "idle", 0, "not connected yet", self.owner)

    # ----- on the manager's loop ------------------------------------------------------------------------------

    async def refresh(self, max_age_s: float) -> None:
        """Connect if needed, and list the tools again when the last listing is older than `max_age_s`.
        Never raises: a failure shows in the status and the server offers no tools until it is back."""
        try:
            link = await self._ensure()
        except ToolError:
            return
        if time.monotonic() - self._listed_at <= max_age_s or link.client is None:
            return
        try:
            with anyio.fail_after(self.settings.connect_timeout_s):
                self._tools = await self._list_tools(link.client)
            self._listed_at = time.monotonic()
        except Exception as exc:  # anything the server or transport does ends up in the status
            self._error = f"listing its tools failed: {describe(exc)}"
            if _broken(exc):
                await self._drop(link, describe(exc))

    async def call(self, tool: str, arguments: dict[str, Any], questions: QuestionChannel | None = None,
                   trace: Context | None = None) -> types.CallToolResult:
        """Call `tool` under the time limit; every failure is a ToolError that says what happened. `questions`: where
        the server's questions to the user during the call go (app/mcp_client/elicitation.py); none: it may not
        ask. `trace`: the span the request's own belongs to (the tool call's; app/telemetry/spans.py)."""
        return await self._request("call", lambda client: client.call_tool(tool, arguments), questions=questions,
                                   method=("tools/call", tool), trace=trace)

    async def list_prompts(self, max_age_s: float = LISTING_MAX_AGE_S) -> tuple[types.Prompt, ...]:
        """The server's prompts (every page, at most MAX_LISTED), listed again when older than `max_age_s`; none
        when it offers none. ToolError when it cannot be reached or refuses."""
        async def fetch(client: Client) -> tuple[Any, ...]:
            if client.server_capabilities.prompts is None:
                return ()
            return await _pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")

        return await self._listed("prompts", fetch, max_age_s, "prompts/list")

    async def list_resources(self, max_age_s: float = LISTING_MAX_AGE_S) -> tuple[types.Resource, ...]:
        """The server's resources, as `list_prompts` lists prompts."""
        async def fetch(client: Client) -> tuple[Any, ...]:
            if client.server_capabilities.resources is None:
                return ()
            return await _pages(lambda cursor: client.list_resources(cursor=cursor), "resources")

        return await self._listed("resources", fetch, max_age_s, "resources/list")

    async def list_resource_templates(self, max_age_s: float = LISTING_MAX_AGE_S
                                      ) -> tuple[types.ResourceTemplate, ...]:
        """The server's resource templates (URIs with {variables}), as `list_prompts` lists prompts."""
        async def fetch(client: Client) -> tuple[Any, ...]:
            if client.server_capabilities.resources is None:
                return ()
            return await _pages(lambda cursor: client.list_resource_templates(cursor=cursor), "resource_templates")

        return await self._listed("resource templates", fetch, max_age_s, "resources/templates/list")

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> types.GetPromptResult:
        """Prompt `name` filled with `arguments`, under the call time limit; ToolError says what went wrong."""
        return await self._request("prompt request", lambda client: client.get_prompt(name, arguments),
                                   method=("prompts/get", name))

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """The contents of resource `uri`, under the call time limit; ToolError says what went wrong."""
        return await self._request("resource read", lambda client: client.read_resource(uri),
                                   method=("resources/read", uri))

    async def _listed(self, kind: str, fetch: Callable[[Client], Awaitable[tuple[Any, ...]]],
                      max_age_s: float, method: str) -> tuple[Any, ...]:
        """A listing kept for `max_age_s` while the same connection lasts (pages redraw on every click)."""
        link = await self._ensure()
        kept = self._listings.get(kind)
        if kept is not None and kept[0] is link and time.monotonic() - kept[1] <= max_age_s:
            return kept[2]
        items = await self._request(f"listing of its {kind}", fetch, self.settings.connect_timeout_s,
                                    method=(method, ""))
        self._listings[kind] = (link, time.monotonic(), items)
        return items

    async def _request(self, what: str, send: Callable[[Client], Awaitable[T]], limit: float | None = None,
                       questions: QuestionChannel | None = None, method: tuple[str, str] = ("", ""),
                       trace: Context | None = None) -> T:
        """`send` on the connection (made if needed) under `limit` (the call time limit by default), in a span named
        after `method` (the MCP method, and the tool, prompt or resource it names) under `trace`; every failure is a
        ToolError that says what happened, and a broken connection is dropped to be made again."""
        link = await self._ensure()
        assert link.client is not None
        with spans.mcp_request(self.name, self.kind, *method, parent=trace,
                               protocol_version=self.protocol_version):
            return await self._send(link, what, send, limit, questions)

    async def _send(self, link: _Link, what: str, send: Callable[[Client], Awaitable[T]], limit: float | None,
                    questions: QuestionChannel | None) -> T:
        assert link.client is not None
        limit = self.settings.call_timeout_s if limit is None else limit
        try:
            # On expiry the SDK also tells the server to cancel the request.
            with anyio.fail_after(limit) as scope, self._askers.calling(questions, scope):
                return await send(link.client)
        except TimeoutError:
            raise ToolError(f"the MCP server {self.name!r} did not answer within {limit:g} s; the {what} was "
                            "cancelled.") from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(f"the MCP server {self.name!r} did not answer in time; the {what} was cancelled.") \
                    from None
            if exc.code != CONNECTION_CLOSED:
                raise ToolError(f"the MCP server {self.name!r} refused the {what}: {exc.message}") from None
            failure: BaseException = exc
        except (ValidationError, RuntimeError) as exc:  # a result that breaks the protocol or the tool's own schema
            raise ToolError(f"the MCP server {self.name!r} sent an invalid result: {describe(exc)}") from None
        except _BROKEN as exc:
            failure = exc
        reason = describe(failure)
        await self._drop(link, reason)
        raise ToolError(f"the connection to the MCP server {self.name!r} broke during the {what} ({reason}); it is "
                        f"{self._again} on the next {'call' if what == 'call' else 'use'}.")

    async def sign_out(self) -> None:
        """Forget the user's sign-in to this server and disconnect; the next use asks them to sign in again."""
        if self.sign_in is None:
            return
        await self.sign_in.sign_out()
        if self._link is not None:
            await self._drop(self._link, "you signed out")
        self._failures, self._retry_at = 0, 0.0

    async def close(self) -> None:
        self._closed = True
        if self._link is not None:
            await self._drop(self._link)

    async def _ensure(self) -> _Link:
        async with self._lock:
            link = self._link
            if link is not None and link.client is not None:
                return link
            if link is not None and self.sign_in is not None and self.sign_in.pending is not None:
                raise ToolError(f"the MCP server {self.name!r} waits for you to sign in (Sign in to {self.name}, under "
                                "MCP servers in the sidebar).")
            if self._closed:
                raise ToolError(f"the MCP client for {self.name!r} was shut down.")
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise ToolError(f"the MCP server {self.name!r} is not available ({self._error}); next try in "
                                f"{math.ceil(wait)} s.")
            link = _Link(done=anyio.Event())
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            link.ready = ready
            self._link = link
            # A context of its own: this task outlives the call that connected, and its spans (the SDK's
            # initialize, a reconnect's listing) must not hang off that call's trace.
            link.task = asyncio.create_task(self._hold(link, ready), name=f"mcp-server-{self.name}",
                                            context=contextvars.Context())
            await ready  # ToolError when it could not connect
            return link

    async def _hold(self, link: _Link, ready: asyncio.Future[None]) -> None:
        """Connect, list the tools, then keep the connection open until `link.done` (dropped, or the server left)."""
        connected = False
        reason = "the server exited"
        self._refused = None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.settings.connect_timeout_s) as scope:
                link.scope = scope
                async with AsyncExitStack() as stack:
                    transport = await self._transport(stack, link.done)
                    client = await stack.enter_async_context(
                        Client(transport, cache=None, client_info=CLIENT_INFO,
                               elicitation_callback=self._askers.elicit))
                    client.session.validate_tool_result = self._check_result  # type: ignore[method-assign]
                    tools = await self._list_tools(client)
                    scope.deadline = math.inf  # connected: from now on only `done` ends it
                    link.client, connected = client, True
                    self._tools, self._listed_at, self._error, self._failures = tools, time.monotonic(), "", 0
                    if not ready.done():
                        ready.set_result(None)
                    if self.sign_in is not None:
                        self.sign_in.finished()
                    await link.done.wait()
            if not connected:
                raise TimeoutError(f"no answer within {self.settings.connect_timeout_s:g} s")
        except Exception as exc:  # whatever went wrong is reported, never raised into the loop
            reason = describe(exc, self._refused)
            if self.sign_in is not None and _no_sign_in_offered(exc, self.sign_in):
                reason = "the server refused the request (HTTP 401) and offers no sign-in: add it with its bearer token"
        finally:
            if self.sign_in is not None and not connected:
                self.sign_in.finished(reason)
            link.client = None
            if self._link is link:
                self._link = None
            if not connected:
                self._failures += 1
                self._retry_at = time.monotonic() + min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self._failures - 1))
                self._error = f"cannot connect: {reason}"
                if not ready.done():
                    ready.set_exception(ToolError(f"the MCP server {self.name!r} is not available ({reason})."))
            elif not link.stopping:
                self._error = f"disconnected: {reason}; it is {self._again} on next use"

    async def _drop(self, link: _Link, broken: str = "") -> None:
        """Close this connection (if it is still the current one) and wait, within limits, until it is closed.
        `broken`: why it had to be closed, for the status."""
        if self._link is link:
            self._link = None
        if broken and not link.stopping:
            self._error = f"disconnected: {broken}; it is {self._again} on next use"
        link.stopping = True
        link.done.set()
        if self.sign_in is not None:
            self.sign_in.abandon("the sign-in was stopped: the server was removed or the app is closing")
        if link.task is not None and link.task is not asyncio.current_task():
            await asyncio.wait({link.task}, timeout=STOP_TIMEOUT_S)

    async def _transport(self, stack: AsyncExitStack, done: anyio.Event) -> Transport:
        spec = self.spec
        if isinstance(spec, StdioServer):
            parameters = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env or None, cwd=spec.cwd)
            return _watched(stdio_client(parameters, errlog=_errlog()), done)
        assert isinstance(spec, HttpServer)
        # The SDK's OAuth provider puts the access token on requests to this server only: each server has its own
        # client, the flow's own requests (metadata, registration, tokens) carry none, and redirects off the
        # server's origin are not followed. A server a user added is reached at the address the SSRF guard judged,
        # checked again at every connection (what a name resolves to can change), and so is every URL a sign-in
        # requests (whatever a server's metadata names): app/mcp_client/http_client.py. No proxy from the
        # environment then: it would look the name up again itself.
        transport = None
        if self.guard_url:
            transport = PinnedTransport(spec.url, await anyio.to_thread.run_sync(check_url, spec.url))
        max_bytes = int(self.settings.max_result_mb * 2**20)
        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers=spec.headers, timeout=httpx2.Timeout(self.settings.connect_timeout_s, read=_SSE_READ_TIMEOUT_S),
            event_hooks={"response": [self._note_refusal, cap_body(max_bytes)]}, transport=transport,
            trust_env=transport is None, auth=self.sign_in.provider if self.sign_in is not None else None))
        return streamable_http_client(spec.url, http_client=http, max_sse_event_size=max_bytes)

    async def _check_result(self, name: str, result: types.CallToolResult) -> None:
        """Stands in for the SDK's check of a result against its tool's output schema (`validate_tool_result`, same
        outcome: RuntimeError), through app/limits/schema_validation.py and in a worker thread. The SDK's runs
        jsonschema's regexes on `re`, here on the loop that every server's calls share: a backtracking pattern froze
        them all."""
        schema = next((tool.output_schema for tool in self._tools if tool.name == name), None)
        if schema is None:
            return
        if result.structured_content is None and "structured_content" not in result.model_fields_set:
            raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")

        def problem() -> str | None:
            try:
                errors = SchemaValidator(schema).errors(result.structured_content, first_only=True)
            except SchemaError as exc:
                return f"Invalid schema for tool {name}: {exc.message}"
            return f"Invalid structured content returned by tool {name}: {errors[0].message}" if errors else None

        if (found := await anyio.to_thread.run_sync(problem)) is not None:
            raise RuntimeError(found)

    async def _list_tools(self, client: Client) -> tuple[types.Tool, ...]:
        with spans.mcp_request(self.name, self.kind, "tools/list", protocol_version=self.protocol_version):
            return await _list_all(client)

    async def _note_refusal(self, response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            self._refused = response.status_code

    def _awaiting_user(self) -> None:
        """The user is sent to sign in: the attempt waits for them (the sign-in keeps its own deadline), and whoever
        waits for the connection learns why now."""
        link = self._link
        if link is None:
            return
        if link.scope is not None:
            link.scope.deadline = math.inf
        if link.ready is not None and not link.ready.done():
            link.ready.set_exception(ToolError(f"the MCP server {self.name!r} needs you to sign in."))

    def _user_back(self) -> None:
        """The sign-in's answer came (or it was given up): the rest of the connection has the usual time."""
        link = self._link
        if link is not None and link.scope is not None and link.client is None:
            link.scope.deadline = anyio.current_time() + self.settings.connect_timeout_s


@asynccontextmanager
async def _watched(transport: Transport, done: anyio.Event) -> AsyncIterator[Any]:
    """The transport's streams, with `done` set when the server's side ends (a stdio server that exited), so that
    the connection is known to be gone before the next call finds out."""
    async with transport as (read, write):
        forward, receive = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            try:
                async with forward:
                    async for item in read:
                        await forward.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the session closed its end first: we are shutting down anyway
            finally:
                done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive, write
            finally:
                group.cancel_scope.cancel()


async def _list_all(client: Client) -> tuple[types.Tool, ...]:
    if client.server_capabilities.tools is None:
        return ()
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)


async def _pages(fetch: Callable[[str | None], Awaitable[Any]], field: str) -> tuple[Any, ...]:
    """Every page of a listing (`field` of each result), at most _MAX_PAGES pages and MAX_LISTED items."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor or len(items) >= MAX_LISTED:
            break
    return tuple(items[:MAX_LISTED])


def _broken(exc: BaseException) -> bool:
    return isinstance(exc, _BROKEN) or (isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED)


def describe(exc: BaseException, refused: int | None = None) -> str:
    """A short, plain account of a connection or call failure (never the headers, which may hold a token)."""
    if (problem := _sign_in_problem(exc)) is not None:
        return problem
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if refused is not None:
        return f"the server refused the request (HTTP {refused}): check the bearer token or headers"
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return "the connection closed: the server exited or crashed"
        return exc.message
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, httpx2.ConnectError):
        return f"nothing answers at that address ({exc or 'connection refused'})"
    if isinstance(exc, httpx2.TimeoutException):
        return "the server did not answer in time"
    if isinstance(exc, ToolError | TimeoutError) and str(exc):
        return str(exc).rstrip(".")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _no_sign_in_offered(exc: BaseException, sign_in: SignIn) -> bool:
    """Whether a sign-in failed because the server publishes no OAuth metadata at all (it wants a bearer token):
    the SDK then tries the legacy endpoints at the server's origin, and its registration there fails."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_no_sign_in_offered(inner, sign_in) for inner in exc.exceptions)
    context = sign_in.provider.context
    return isinstance(exc, OAuthRegistrationError) and context.protected_resource_metadata is None \
        and context.oauth_metadata is None


def _sign_in_problem(exc: BaseException) -> str | None:
    """Why a sign-in failed, wherever in `exc` (an exception group from the transport's tasks) it shows: before the
    401 that started it, which would otherwise be blamed on the token."""
    if isinstance(exc, BaseExceptionGroup):
        return next((found for inner in exc.exceptions if (found := _sign_in_problem(inner)) is not None), None)
    if isinstance(exc, SignInError | ToolError):  # ToolError: the SSRF guard refused a URL the metadata named
        return str(exc).rstrip(".")
    if isinstance(exc, OAuthFlowError | OAuthRegistrationError | OAuthTokenError):  # the SDK's, about the protocol
        return f"signing in failed: {exc}"
    return None


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: the app's own (it must be a real file; pytest may swap in one that
    is not)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return open(os.devnull, "w")  # lives as long as the server
