"""OpenAI-compatible HTTP API over the same core: `make serve` (or `python -m app.server --help`).

One loaded backend (transformers, vLLM or another OpenAI server) serves every request; prompts, tool-call
dialects, forced calls, response formats and parsing are the clients' own, so the API behaves exactly like the
app. Requests and answers are typed (app/server/protocol.py, `openai.types.chat` in app/server/answers.py).
Streams are Server-Sent Events through sse-starlette in OpenAI's format: the role first, content deltas and
`delta.tool_calls` pieces as they are generated (name first, then argument text), the finish reason, usage when
asked, `[DONE]`. GET /metrics is in Prometheus' format.

No client can hold the model or the process: a connection whose request headers or body do not arrive in time is
closed (app/http_timeouts.py); bodies over 4 MB and conversations over the message and character
limits are refused before any model work; a client that disconnects, streaming or not, cancels its generation;
on shutdown every generation is cancelled. Every error, whatever failed, is answered in OpenAI's error shape
without server internals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.server import protocol as api
from app.clients.base import Client, ClientError, Delta
from app.clients.registry import create_client
from app.config import HTTPTimeouts, ImageSettings, ModelSettings, ServerSettings, offline_by_default
from app.http_timeouts import uvicorn_options
from app.server.metrics import ServerMetrics
from app.server.protocol import APIError, ChatRequest, ErrorBody, ModelList, error_response
from app.server.answers import Reply, finish_reason

log = logging.getLogger(__name__)
MAX_TEXT_BODY_BYTES = 4 * 1024 * 1024  # a request's JSON besides its images


def max_body_bytes() -> int:
    """The text's share plus one message's worth of images, base64-encoded (4 bytes for every 3)."""
    return MAX_TEXT_BODY_BYTES + int(ImageSettings.from_env().max_message_mb * 2**20 * 4 / 3)


DISCONNECT_POLL_S = 0.1  # how often a request looks whether its client is still there
_END = object()


# One Server-Sent Event of a streamed completion (OpenAPI before 3.2 describes a stream by its events).
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string", "description": "A chat.completion.chunk as JSON, an {\"error\": ...} object, or [DONE]."},
    "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"}}}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route can give."""
    return {status: {"model": ErrorBody} for status in statuses}


class BodySizeLimit:
    """413 for request bodies over the limit, whether they declare their length or come in chunks: the body is read
    (up to the limit) before the app sees the request, then handed to it whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        too_long = declared.isdigit() and int(declared) > self.limit  # refused without reading a byte of it
        first = None if too_long else await self._read(receive)
        if first is None:
            await error_response(413, f"The request body is larger than {self.limit} bytes.",
                                 code="request_too_large")(scope, receive, send)
            return
        pending = [first]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> Message | None:
        """The whole body as one message (or the disconnect that cut it short); None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return None
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}


class KeyCheckAndCount:
    """401 for /v1/ requests without the API key (when the server has one); counts every answer by route and
    status. Inside the CORS middleware, so that a browser's preflight is answered before any key is asked for."""

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
        if not self.api_key or not scope["path"].startswith("/v1/"):
            return True
        given = Headers(scope=scope).get("authorization", "")
        return secrets.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())


class DeltaPump:
    """A client's blocking stream of deltas, read on a thread of its own and handed to the event loop. Only that
    thread touches the iterator (closing it included), so a request cancelled mid-read never races it; setting
    `cancel` ends it within a heartbeat. `on_end` is called on that thread once the stream is closed, which
    stops the backend's generation."""

    def __init__(self, deltas: Iterator[Delta], cancel: threading.Event, on_end: Callable[[], None]) -> None:
        self.cancel, self._on_end = cancel, on_end
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        threading.Thread(target=self._read, args=(deltas,), name="api-deltas", daemon=True).start()

    def _read(self, deltas: Iterator[Delta]) -> None:
        try:
            with closing(deltas):  # closing mid-stream aborts the generation
                for delta in deltas:
                    if self.cancel.is_set():
                        break
                    if not delta.is_heartbeat:  # beats only matter to the reader: they let it see `cancel`
                        self._put(delta)
        except BaseException as exc:  # handed to the request, never lost in the thread
            self._put(exc)
        finally:
            self._on_end()
            self._put(_END)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: nobody is listening any more
            self.cancel.set()

    async def next(self) -> Delta | None:
        """The next delta; None at the end. A request the backend cannot serve is a 400."""
        item = await self._queue.get()
        if item is _END:
            return None
        if isinstance(item, ClientError):
            raise APIError(400, str(item))
        if isinstance(item, BaseException):
            raise item
        return item


@dataclass(eq=False)
class InFlight:
    """One chat completion being generated: its deltas, when it started, and whether its client has left."""

    pump: DeltaPump
    started: float = field(default_factory=time.perf_counter)
    client_left: bool = False
    watcher: asyncio.Task[None] | None = None

    def watch(self, request: Request) -> None:
        self.watcher = asyncio.create_task(self._watch(request))

    async def _watch(self, request: Request) -> None:
        """Cancel the generation as soon as the client has gone, whether it waits for a whole answer or a stream."""
        while not self.stopped:
            if await request.is_disconnected():
                self.client_left = True
                self.pump.cancel.set()
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    @property
    def stopped(self) -> bool:
        """Cancelled before the answer was complete: the client left, or the server is shutting down."""
        return self.pump.cancel.is_set()


class ModelHolder:
    """The one backend of this server, loaded at start-up on a thread so /health answers meanwhile."""

    def __init__(self, settings: ModelSettings | None, client: Client | None, served_name: str | None) -> None:
        self.client, self.error, self.served_name = client, None, served_name
        if client is None and settings is not None:
            threading.Thread(target=self._load, args=(settings,), daemon=True).start()
        elif client is not None and not served_name:
            self.served_name = _default_name(client)

    def _load(self, settings: ModelSettings) -> None:
        try:
            client = create_client(settings)
        except Exception as exc:  # reported by /health and as 503, the server stays up
            self.error = str(exc)
            return
        self.served_name = self.served_name or _default_name(client)
        self.client = client

    def require(self) -> Client:
        if self.client is None:
            raise APIError(503, f"The model is not loaded: {self.error}" if self.error else "The model is still loading.",
                           kind="service_unavailable")
        return self.client


def _default_name(client: Client) -> str:
    return client.capabilities.model_id


def create_app(settings: ModelSettings | None = None, client: Client | None = None, served_name: str | None = None,
               api_key: str | None = None, cors_origins: list[str] | None = None, default_max_tokens: int = 1024,
               max_messages: int = ServerSettings.max_messages, max_chars: int = ServerSettings.max_chars) -> FastAPI:
    """The API app. Pass `client` to serve an already loaded backend (tests), or `settings` to load one. A chat
    request with more than `max_messages` messages or `max_chars` characters of text in them is a 413."""
    holder = ModelHolder(settings, client, served_name)
    metrics = ServerMetrics()
    metrics.watch_model(lambda: holder.client.activity() if holder.client is not None else None)
    completions = ChatCompletions(holder, metrics, default_max_tokens, RequestLimits(max_messages, max_chars))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        completions.cancel_all()  # whatever is still generating must not keep the process alive

    app = FastAPI(title="Composite LLM demo API", version="1.0", lifespan=lifespan,
                  description="OpenAI-compatible chat completions with tool calls and structured output.")
    _add_middleware(app, metrics, api_key, cors_origins)
    _add_error_handlers(app, metrics)

    @app.get("/health", responses={503: {"description": "The model is loading or failed to load."}})
    async def health() -> JSONResponse:
        status = "ok" if holder.client else ("error" if holder.error else "loading")
        body = {"status": status, "model": holder.served_name, "error": holder.error}
        return JSONResponse(body, status_code=200 if holder.client else 503)

    @app.get("/metrics", response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format."}})
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    @app.get("/v1/models", response_model=ModelList, responses=_errors(401, 413, 503))
    async def models() -> ModelList:
        client = holder.require()
        return ModelList(data=[Model(id=holder.served_name or "", object="model", created=0, owned_by="composite-demo",
                                     max_model_len=client.capabilities.context_window)])

    app.post("/v1/chat/completions", response_model=ChatCompletion, response_model_exclude_unset=True,
             responses={200: {"content": {"text/event-stream": {"schema": _SSE_EVENT}},
                              "description": "The completion, or with stream=true its chunks as Server-Sent Events."},
                        **_errors(400, 401, 404, 413, 422, 503)})(completions.create)
    return app


def _add_middleware(app: FastAPI, metrics: ServerMetrics, api_key: str | None, cors_origins: list[str] | None) -> None:
    # The last added runs first: CORS (preflights answered, headers on every answer, errors included), then the
    # key, then the body's size.
    app.add_middleware(BodySizeLimit, limit=max_body_bytes())
    app.add_middleware(KeyCheckAndCount, api_key=api_key, metrics=metrics)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    """Every error in OpenAI's shape, with a message for the client and nothing of the server's internals."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        metrics.errors.labels(exc.kind).inc()
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.errors.labels("invalid_request_error").inc()
        message, param = _validation_message(exc.errors()[0] if exc.errors() else {})
        return error_response(422, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        metrics.errors.labels("invalid_request_error").inc()
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def server_error(_: Request, exc: Exception) -> JSONResponse:  # logged by uvicorn, traceback included
        metrics.errors.labels("server_error").inc()
        return error_response(500, "The server failed to answer this request.", kind="server_error")


def _validation_message(error: dict[str, Any]) -> tuple[str, str | None]:
    """A request validation error as a message and the parameter it is about, from its location and pydantic's
    message only: its input, context and URL would echo the request or name the server's code."""
    location = [str(part) for part in error.get("loc", ())[1:]]  # without "body"
    if error.get("type") == "json_invalid":  # located by the character where decoding failed
        problem = str(error.get("ctx", {}).get("error", "decode error")).removesuffix(" at")
        return f"The request body is not valid JSON: {problem} at character {location[0] if location else 0}.", None
    if not location:
        return "The request body must be a JSON object (Content-Type: application/json).", None
    where = ".".join(location)
    return f"{where}: {error.get('msg', 'invalid value')}", where


@dataclass(frozen=True)
class RequestLimits:
    """The most messages, and characters of text in them, that one chat request may have."""

    max_messages: int
    max_chars: int


class ChatCompletions:
    """POST /v1/chat/completions: the request through the loaded client, answered whole or as an SSE stream."""

    def __init__(self, holder: ModelHolder, metrics: ServerMetrics, default_max_tokens: int,
                 limits: RequestLimits) -> None:
        self.holder, self.metrics, self.default_max_tokens, self.limits = holder, metrics, default_max_tokens, limits
        self._in_flight: set[InFlight] = set()

    async def create(self, body: ChatRequest, request: Request) -> Any:
        api.check_size(body, self.limits.max_messages, self.limits.max_chars)
        client = self.holder.require()
        if body.model != self.holder.served_name:
            raise APIError(404, f"The model {body.model!r} does not exist here; this server serves "
                                f"{self.holder.served_name!r}.", param="model", code="model_not_found")
        api.check_supported(body)
        params = api.generation_params(body, client.generation_defaults, self.default_max_tokens)
        # Validating schemas against the meta-schema is pure Python (up to a few tenths of a second): off the loop.
        tools = await run_in_threadpool(api.tool_request, body)
        response_format = await run_in_threadpool(api.response_format, body)
        # Images are decoded (and http(s) ones fetched, where allowed) off the event loop.
        messages = await run_in_threadpool(api.messages, body, api.image_fetcher(ImageSettings.from_env()))
        cancel = threading.Event()
        self.metrics.in_progress.inc()  # down again once the generation has stopped (DeltaPump's on_end)
        flight = InFlight(DeltaPump(client.stream(messages, params, cancel, tools, response_format), cancel,
                                    self.metrics.in_progress.dec))
        flight.watch(request)
        self._in_flight.add(flight)
        try:
            # The first delta before answering: a request that cannot be served is an HTTP error, not a broken
            # stream.
            first = await flight.pump.next()
        except BaseException:
            self._done(flight, None, "error")
            raise
        reply = Reply(model=self.holder.served_name or "")
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventSourceResponse(self._events(flight, first, reply, include_usage), sep="\n", ping=15)
        return await self._whole(flight, first, reply)

    def cancel_all(self) -> None:
        """Stop every generation still running: the server is shutting down."""
        for flight in list(self._in_flight):
            flight.pump.cancel.set()

    async def _whole(self, flight: InFlight, first: Delta | None, reply: Reply) -> Any:
        """The whole completion; if the client left meanwhile, an answer nobody reads (499, as nginx logs it)."""
        ended = "cancelled"
        try:
            item = first
            while item is not None:
                reply.add(item)
                item = await flight.pump.next()
            if flight.client_left:
                return error_response(499, "The client closed the request.", kind="client_closed_request")
            if flight.stopped:
                raise APIError(503, "The server is shutting down.", kind="service_unavailable")
            ended = finish_reason(reply.last)
        finally:
            self._done(flight, reply, ended)
        return reply.completion()

    async def _events(self, flight: InFlight, first: Delta | None, reply: Reply,
                      include_usage: bool) -> AsyncIterator[dict[str, str]]:
        """The SSE events of one streamed reply; closing this generator (the client left) cancels the generation."""
        ended = "cancelled"
        try:
            yield _event(reply.chunk(ChoiceDelta(role="assistant", content="")))
            item = first
            while item is not None:
                reply.add(item)
                for chunk in reply.chunks(item):
                    yield _event(chunk)
                try:
                    item = await flight.pump.next()
                except Exception as exc:  # the backend failed mid-stream: say so in the stream, as vLLM does
                    ended = "error"
                    self.metrics.errors.labels("server_error").inc()
                    if not isinstance(exc, APIError):  # a bug: its details go to the log, not to the client
                        log.exception("Streaming a chat completion failed")
                    yield _error_event(exc.message if isinstance(exc, APIError) else "Generating the answer failed.")
                    return
            if flight.stopped:  # cancelled: no finish reason, no [DONE]
                if not flight.client_left:
                    yield _error_event("The generation was cancelled: the server is shutting down.")
                return
            ended = finish_reason(reply.last)
            yield _event(reply.chunk(ChoiceDelta(), finish=ended))
            if include_usage:
                yield _event(reply.chunk(usage=reply.usage()))
            yield {"data": "[DONE]"}
        finally:
            self._done(flight, reply, ended)

    def _done(self, flight: InFlight, reply: Reply | None, ended: str) -> None:
        flight.pump.cancel.set()  # a no-op after a complete reply; otherwise it stops the generation
        if flight.watcher is not None:
            flight.watcher.cancel()
        self._in_flight.discard(flight)
        if reply is not None:
            self.metrics.record_answer(reply.metrics, ended, time.perf_counter() - flight.started)


def _event(chunk: ChatCompletionChunk) -> dict[str, str]:
    return {"data": chunk.model_dump_json(exclude_unset=True)}


def _error_event(message: str) -> dict[str, str]:
    return {"data": json.dumps({"error": {"message": message, "type": "server_error", "param": None, "code": None}})}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.server", description="OpenAI-compatible API over the demo's backends.")
    defaults = ModelSettings.from_env()
    parser.add_argument("--backend", default=defaults.backend, help="hf, vllm or openai (default: %(default)s)")
    parser.add_argument("--model", default=defaults.model_path, help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients use (default: folder name)")
    server = ServerSettings.from_env()
    parser.add_argument("--host", default=server.host)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=server.api_key,
                        help="require this key as a Bearer token (env DEMO_SERVER_API_KEY)")
    parser.add_argument("--cors-origins", default=server.cors_origins,
                        help="comma-separated browser origins allowed to call the API (default: none)")
    parser.add_argument("--max-messages", type=int, default=server.max_messages,
                        help="most messages in one request (env DEMO_SERVER_MAX_MESSAGES, default: %(default)s)")
    parser.add_argument("--max-chars", type=int, default=server.max_chars,
                        help="most characters of text in one request's messages (env DEMO_SERVER_MAX_CHARS, "
                             "default: %(default)s)")
    args = parser.parse_args()
    offline_by_default()
    import uvicorn

    settings = ModelSettings(**{**defaults.__dict__, "backend": args.backend, "model_path": args.model})
    origins = [origin.strip() for origin in args.cors_origins.split(",") if origin.strip()]
    app = create_app(settings=settings, served_name=args.served_model_name, api_key=args.api_key,
                     cors_origins=origins, max_messages=args.max_messages, max_chars=args.max_chars)
    print(f"Serving the OpenAI-compatible API on http://{args.host}:{args.port}/v1 (model loads in the background; "
          "GET /health says when it is ready)")
    # On SIGTERM, requests still running after the timeout are cancelled, and with them their generations.
    # Connections that never finish sending a request are closed (app/http_timeouts.py).
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=server.shutdown_timeout_s, **uvicorn_options(HTTPTimeouts.from_env()))

