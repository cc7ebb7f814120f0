"""What every request passes before a route sees it: CORS, the API key, the body's size; and the count of every
answer by route and status for /metrics."""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import ImageSettings, KnowledgeSettings
from app.frontends.api.chat_completions.chat_protocol import error_response
from app.frontends.api.metrics import ServerMetrics

MAX_TEXT_BODY_BYTES = 4 * 1024 * 1024  # a request's JSON besides its images
UPLOAD_OVERHEAD_BYTES = 1024 * 1024  # a multipart body's boundaries and fields around an uploaded file
# What a server with an API key asks the key for: the API, and its description (which tells a stranger every route,
# limit and extension). /health and /metrics stay open for probes and Prometheus' scraper, which carry no key by
# default: they hold the model's name and counters, no request's content and no key.
KEYED_PREFIX = "/v1/"
KEYED_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


def max_body_bytes() -> int:
    """The text's share plus one message's worth of images, base64-encoded (4 bytes for every 3)."""
    return MAX_TEXT_BODY_BYTES + int(ImageSettings.from_env().max_message_mb * 2**20 * 4 / 3)


def max_upload_bytes() -> int:
    """A /v1/files body: the largest file knowledge takes (DEMO_KNOWLEDGE_MAX_FILE_MB) and its multipart wrapping."""
    return KnowledgeSettings.from_env().max_file_mb * 2**20 + UPLOAD_OVERHEAD_BYTES


def add_middleware(app: FastAPI, metrics: ServerMetrics, api_key: str | None, cors_origins: tuple[str, ...]) -> None:
    # The last added runs first: CORS (preflights answered, headers on every answer, errors included), then the
    # key, then the body's size.
    app.add_middleware(BodySizeLimit, limit=max_body_bytes(), larger={"/v1/files": max_upload_bytes()})
    app.add_middleware(KeyCheckAndCount, api_key=api_key, metrics=metrics)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)


class BodySizeLimit:
    """413 for request bodies over the limit, whether they declare their length or come in chunks: the body is read
    (up to the limit) before the app sees the request, then handed to it whole. `larger`: paths allowed more (file
    uploads)."""

    def __init__(self, app: ASGIApp, limit: int, larger: Mapping[str, int] | None = None) -> None:
        self.app, self.limit, self.larger = app, limit, dict(larger or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.larger.get(scope["path"], self.limit)
        declared = Headers(scope=scope).get("content-length", "")
        too_long = declared.isdigit() and int(declared) > limit  # refused without reading a byte of it
        first = None if too_long else await self._read(receive, limit)
        if first is None:
            await error_response(413, f"The request body is larger than {limit} bytes.",
                                 code="request_too_large")(scope, receive, send)
            return
        pending = [first]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, limit: int) -> Message | None:
        """The whole body as one message (or the disconnect that cut it short); None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return None
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}


class KeyCheckAndCount:
    """401 for /v1/ requests, and for the API's description (/openapi.json, /docs, /redoc), without the API key
    (when the server has one); counts every answer by route and status. Inside the CORS middleware, so that a
    browser's preflight is answered before any key is asked for."""

    def __init__(self, app: ASGIApp, api_key: str | None, metrics: ServerMetrics) -> None:
        self.app, self.api_key, self.metrics = app, api_key, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets if the app fails before answering

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self._authorized(scope):
                await self.app(scope, receive, counted)
            else:
                self.metrics.errors.labels("authentication_error").inc()
                await error_response(401, "Invalid or missing API key (Authorization: Bearer <key>).",
                                     kind="authentication_error", code="invalid_api_key")(scope, receive, counted)
        finally:
            route = scope.get("route")
            self.metrics.requests.labels(getattr(route, "path", "unmatched"), str(status)).inc()

    def _authorized(self, scope: Scope) -> bool:
        path = scope["path"]
        if not self.api_key or not (path.startswith(KEYED_PREFIX) or path in KEYED_PATHS):
            return True
        given = Headers(scope=scope).get("authorization", "")
        return secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())
