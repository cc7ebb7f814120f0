"""An MCP server that needs sign-in, and its authorization server, for the tests: both built with the SDK's server
side (mcp.server.auth), in one process on two 127.0.0.1 ports.

    python oauth_servers.py AS_PORT RS_PORT [ACCESS_TOKEN_SECONDS]

- The authorization server (http://127.0.0.1:AS_PORT) serves the SDK's auth routes (metadata, dynamic client
  registration, /authorize, /token with PKCE checked, /revoke) over an in-memory provider that approves every
  authorization at once: /authorize redirects straight back to the client's redirect_uri with `code` and `state`,
  so a test can follow it with an HTTP client (or a browser). Access tokens last ACCESS_TOKEN_SECONDS (3600).
  GET /stats says what happened (registrations, authorizations with their PKCE method, code exchanges, refreshes,
  the tokens issued) for the tests to check.
- The MCP server (http://127.0.0.1:RS_PORT/mcp) needs a token from it (FastMCP's auth settings with a token
  verifier: 401 with its protected resource metadata otherwise), and offers `add` and `whoami`.

It stops by itself when its stdin closes (the test process that started it is gone) or after ten minutes.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import threading
import time
from typing import Any

import uvicorn
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class AutoApprovingProvider:
    """OAuthAuthorizationServerProvider in memory; every authorization is granted to the user "tester"."""

    def __init__(self, access_seconds: int) -> None:
        self.access_seconds = access_seconds
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats: dict[str, Any] = {"registrations": 0, "authorizations": [], "code_exchanges": 0, "refreshes": 0,
                                      "access_tokens": [], "refresh_tokens": []}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.stats["registrations"] += 1

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id,
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
            subject="tester")
        self.stats["authorizations"].append({"code_challenge": bool(params.code_challenge),
                                             "redirect_uri": str(params.redirect_uri), "resource": params.resource})
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.stats["code_exchanges"] += 1
        return self._issue(authorization_code.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        self.stats["refreshes"] += 1
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = f"at-{secrets.token_urlsafe(24)}", f"rt-{secrets.token_urlsafe(24)}"
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes, resource=resource,
                                          expires_at=int(time.time()) + self.access_seconds, subject="tester")
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource,
                                             subject="tester")
        self.stats["access_tokens"].append(access)
        self.stats["refresh_tokens"].append(refresh)
        return OAuthToken(access_token=access, expires_in=self.access_seconds, refresh_token=refresh,
                          scope=" ".join(scopes) or None)


class Verifier:
    """The MCP server's TokenVerifier: asks the authorization server's memory (they share the process)."""

    def __init__(self, provider: AutoApprovingProvider) -> None:
        self.provider = provider

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.provider.load_access_token(token)


def authorization_server(provider: AutoApprovingProvider, issuer: str) -> Starlette:
    async def stats(request: Request) -> JSONResponse:
        return JSONResponse(provider.stats)

    routes = create_auth_routes(provider, AnyHttpUrl(issuer),
                                client_registration_options=ClientRegistrationOptions(enabled=True),
                                revocation_options=RevocationOptions(enabled=True))
    return Starlette(routes=[*routes, Route("/stats", stats)])


def protected_server(provider: AutoApprovingProvider, issuer: str, resource: str) -> Any:
    server = MCPServer("protected", log_level="CRITICAL", token_verifier=Verifier(provider),
                       auth=AuthSettings(issuer_url=AnyHttpUrl(issuer), resource_server_url=AnyHttpUrl(resource),
                                         validate_token_resource=True))

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def whoami() -> str:
        """Who the token says the caller is."""
        token = get_access_token()
        return token.subject or "nobody" if token is not None else "nobody"

    return server.streamable_http_app(host="127.0.0.1")


def _stop_when_orphaned() -> None:
    threading.Timer(600, os._exit, (0,)).start()

    def watch() -> None:
        sys.stdin.buffer.read()  # returns at EOF: whoever started us is gone
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


async def main() -> None:
    as_port, rs_port = int(sys.argv[1]), int(sys.argv[2])
    provider = AutoApprovingProvider(int(sys.argv[3]) if len(sys.argv) > 3 else 3600)
    issuer, resource = f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{rs_port}/mcp"
    servers = [uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
               for app, port in ((authorization_server(provider, issuer), as_port),
                                 (protected_server(provider, issuer, resource), rs_port))]
    await asyncio.gather(*(server.serve() for server in servers))


if __name__ == "__main__":
    _stop_when_orphaned()
    asyncio.run(main())
