"""Signing in to an MCP server that needs it (MCP authorization: OAuth 2.1), through the SDK's OAuthClientProvider.

The SDK does the protocol: on a 401 it discovers the protected resource's metadata and its authorization server,
registers the app as a client (dynamic client registration), sends the user to the authorization endpoint with
PKCE and a random `state`, exchanges the code for tokens, sends the access token to that server only, and refreshes
it when it expires. This module gives it what only the app knows:

- where tokens live: `DatabaseTokenStorage`, each app account's own, encrypted in the database
  (app/storage/mcp_tokens.py); without an app account (no login configured, or a visitor who has not logged in),
  `SessionTokenStorage`, in memory for the one browser session that added the server, gone with it;
- how the user gets to the authorization page and back: `SignIn.redirect_handler` records the authorization URL
  (the sidebar shows it as a "Sign in" link); the authorization server sends the browser back to the app's public
  URL with `code` and `state`, the page hands them to `McpManager.complete_sign_in`, which finds the sign-in whose
  `state` they carry and resolves the future `SignIn.callback_handler` awaits.

A sign-in not completed within McpSettings.sign_in_timeout_s is given up; a wrong `state`, an answer for another
user or an error from the authorization server is refused with a message that says so. Nothing here logs, shows or
returns a token.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import ValidationError

from app.config import McpSettings
from app.storage.errors import StorageError
from app.storage.mcp_tokens import Kind, McpTokenStore

log = logging.getLogger(__name__)

_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class SignInError(Exception):
    """A sign-in that cannot go on; the message says why, in words for the user (never a token or a `state`)."""


class KeptTokens(TokenStorage):
    """A TokenStorage that keeps a sign-in, which the user may forget (Sign out)."""

    async def forget(self) -> None:
        raise NotImplementedError


class DatabaseTokenStorage(KeptTokens):
    """The SDK's TokenStorage for one app account and one server URL, in McpTokenStore (encrypted). `store` is called
    lazily so that a database or key problem shows when a sign-in needs them, not for servers that never do."""

    def __init__(self, store: Callable[[], McpTokenStore], user: str, url: str) -> None:
        self._store = store
        self._user = user
        self._url = url

    async def get_tokens(self) -> OAuthToken | None:
        value = await self._get("tokens")
        if value is None:
            return None
        expires_at = value.pop("expires_at", None)
        if isinstance(expires_at, int | float):  # what is left of it: the SDK only knows an expires_in
            value["expires_in"] = max(0, int(expires_at - time.time()))
        try:
            return OAuthToken.model_validate(value)
        except ValidationError:
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        value = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            value["expires_at"] = time.time() + tokens.expires_in
        await self._put("tokens", value)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        value = await self._get("client_info")
        try:
            return None if value is None else OAuthClientInformationFull.model_validate(value)
        except ValidationError:
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._put("client_info", client_info.model_dump(mode="json", exclude_none=True))

    async def forget(self) -> None:
        await anyio.to_thread.run_sync(lambda: self._store().forget(self._user, self._url))

    async def _get(self, kind: Kind) -> dict[str, Any] | None:
        """What is stored; None, with a warning, while the database cannot be read: a server that needs no sign-in
        must not fail for it (one that does asks for a sign-in, whose saving then says what is wrong)."""
        try:
            return await anyio.to_thread.run_sync(lambda: self._store().get(self._user, self._url, kind))
        except StorageError as exc:
            log.warning("MCP sign-ins cannot be read: %s", exc)
            return None

    async def _put(self, kind: Kind, value: dict[str, Any]) -> None:
        await anyio.to_thread.run_sync(lambda: self._store().put(self._user, self._url, kind, value))


class SessionTokenStorage(KeptTokens):
    """The SDK's TokenStorage for a browser session without an app account: in memory, held by that session's
    connection to the server, so no other session (which adds the same URL and gets a connection of its own) can
    use it, and nothing of it stays in the database once the session ends. The app has no identity for a browser
    beyond its session without a login (conversations then all belong to the one local user): a new tab or a
    reload signs in again."""

    def __init__(self) -> None:
        self._tokens: OAuthToken | None = None
        self._client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client_info = client_info

    async def forget(self) -> None:
        self._tokens = self._client_info = None


class NoTokenStorage(TokenStorage):
    """Where no sign-in can be kept (an app account's, without DEMO_SECRET_KEY to encrypt it): nothing is stored, and
    a sign-in stops with `reason` before the user is sent anywhere."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def get_tokens(self) -> OAuthToken | None:
        return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        raise SignInError(self.reason)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        raise SignInError(self.reason)  # after the registration, before the user is sent anywhere


@dataclass(eq=False)
class Pending:
    """A sign-in waiting for the browser to come back: where to send the user, the `state` the answer must carry,
    and the future the SDK's callback handler awaits."""

    url: str
    state: str
    answer: asyncio.Future[AuthorizationCodeResult]
    outcome: asyncio.Future[str] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SignIn:
    """One server's sign-in for one user (`user`: their app account; None: a browser session without one): the SDK's
    provider (kept for the connection's life, so that what it
    discovered and the token's expiry carry over reconnections) and the sign-in in progress, if any.

    Runs on the manager's event loop, except `matches`, which only compares strings. `on_redirect` is told when the
    user must be sent to the authorization page, `on_answer` when the browser is back (the connection's deadlines).
    """

    def __init__(self, server_url: str, user: str | None, settings: McpSettings, storage: TokenStorage,
                 on_redirect: Callable[[], None], on_answer: Callable[[], None]) -> None:
        self.user = user
        self.settings = settings
        self.pending: Pending | None = None
        self._on_redirect = on_redirect
        self._on_answer = on_answer
        self._server_url = server_url
        self._storage = storage
        self.provider = self._provider()

    @property
    def signed_in(self) -> bool:
        """Whether the provider holds tokens (the user signed in, now or earlier)."""
        return self.provider.context.current_tokens is not None

    async def sign_out(self) -> None:
        """Forget the user's sign-in to this server: stored, and what the provider holds."""
        self.abandon("you signed out")
        if isinstance(self._storage, KeptTokens):
            await self._storage.forget()
        self.provider = self._provider()

    def _provider(self) -> OAuthClientProvider:
        public = urlsplit(self.settings.public_url)
        metadata = OAuthClientMetadata(
            client_name="Composite LLM demo", redirect_uris=[self.settings.public_url],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none",  # a public client: PKCE stands in for a secret
            application_type="native" if public.hostname in _LOOPBACK else "web")
        return OAuthClientProvider(self._server_url, metadata, self._storage, redirect_handler=self._redirect,
                                   callback_handler=self._callback)

    def matches(self, state: str) -> bool:
        pending = self.pending
        return pending is not None and bool(state) and secrets.compare_digest(pending.state.encode(), state.encode())

    def deliver(self, code: str, state: str, iss: str | None, error: str) -> Awaitable[str]:
        """Hand the browser's answer to the waiting flow; what it awaits is "" once signed in, else why not."""
        pending = self.pending
        if pending is None:
            raise SignInError("this sign-in is no longer in progress: start it again from the Sign in button.")
        if not pending.answer.done():
            if error:
                pending.answer.set_exception(SignInError(f"the authorization server refused the sign-in "
                                                         f"({error[:100]})"))
            else:
                pending.answer.set_result(AuthorizationCodeResult(code=code, state=state, iss=iss))
        return asyncio.shield(pending.outcome)

    def abandon(self, reason: str) -> None:
        """Stop a sign-in in progress (the server was removed, the app is closing)."""
        pending = self.pending
        if pending is not None and not pending.answer.done():
            pending.answer.set_exception(SignInError(reason))

    def finished(self, failure: str = "") -> None:
        """The connection attempt that held the sign-in ended: connected ("") or not (why)."""
        pending, self.pending = self.pending, None
        if pending is not None and not pending.outcome.done():
            pending.outcome.set_result(failure)

    async def _redirect(self, authorization_url: str) -> None:
        state = parse_qs(urlsplit(authorization_url).query).get("state", [""])[0]
        loop = asyncio.get_running_loop()
        self.pending = Pending(authorization_url, state, loop.create_future())
        self._on_redirect()

    async def _callback(self) -> AuthorizationCodeResult:
        pending = self.pending
        assert pending is not None  # the SDK calls the redirect handler first
        limit = self.settings.sign_in_timeout_s
        try:
            with anyio.fail_after(limit):
                return await pending.answer
        except TimeoutError:
            pending.answer.cancel()  # the connection attempt fails with this; it ends the sign-in
            minutes = f"{limit / 60:g} min" if limit >= 60 else f"{limit:g} s"
            raise SignInError(f"the sign-in was not completed within {minutes} (DEMO_MCP_SIGN_IN_TIMEOUT_S); "
                              "it starts again on next use") from None
        finally:
            if not pending.answer.done():  # given up or cancelled (a tool call's time ran out): no link left open
                pending.answer.cancel()
                self.finished("the sign-in was interrupted; it starts again on next use")
            self._on_answer()
