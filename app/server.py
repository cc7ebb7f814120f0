"""OpenAI-compatible HTTP API over the same core: `make serve` (or `python -m app.server --help`).

One loaded backend (transformers, vLLM or another OpenAI server) serves every request; prompts, tool-call
dialects, forced calls, response formats and parsing are the clients' own, so the API behaves exactly like the
app. Requests and answers are typed (app/server_models.py, `openai.types.chat` in app/server_responses.py).
Streams are Server-Sent Events through sse-starlette in OpenAI's format: the role first, content deltas and
`delta.tool_calls` pieces as they are generated (name first, then argument text), the finish reason, usage when
asked, `[DONE]`. A client that disconnects cancels its generation. GET /metrics is in Prometheus' format.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from openai.types import Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from sse_starlette import EventSourceResponse

from app import server_models as api
from app.clients.base import Client, ClientError, Delta
from app.clients.registry import create_client
from app.config import ModelSettings, ServerSettings, offline_by_default
from app.server_metrics import ServerMetrics
from app.server_models import APIError, ChatRequest, ErrorBody, ModelList, error_response
from app.server_responses import Reply, finish_reason

MAX_BODY_BYTES = 4 * 1024 * 1024
_END = object()


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route can give."""
    return {status: {"model": ErrorBody} for status in statuses}


class BodySizeLimit:
    """413 for request bodies over the limit, whether or not they declare their length."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await error_response(413, f"The request body is larger than {self.limit} bytes.")(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise APIError(413, f"The request body is larger than {self.limit} bytes.")
            return message

        await self.app(scope, limited_receive, send)


class DeltaPump:
    """A client's blocking stream of deltas, read on a thread of its own and handed to the event loop. Only that
    thread touches the iterator (closing it included), so a request cancelled mid-read never races it; setting
    `cancel` ends it within a heartbeat."""

    def __init__(self, deltas: Iterator[Delta], cancel: threading.Event) -> None:
        self.cancel = cancel
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
               api_key: str | None = None, cors_origins: list[str] | None = None,
               default_max_tokens: int = 1024) -> FastAPI:
    """The API app. Pass `client` to serve an already loaded backend (tests), or `settings` to load one."""
    holder = ModelHolder(settings, client, served_name)
    metrics = ServerMetrics()
    completions = ChatCompletions(holder, metrics, default_max_tokens)
    app = FastAPI(title="Composite LLM demo API", version="1.0",
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
             responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                              "description": "The completion, or with stream=true its chunks as Server-Sent Events."},
                        **_errors(400, 401, 404, 413, 422, 503)})(completions.create)
    return app


def _add_middleware(app: FastAPI, metrics: ServerMetrics, api_key: str | None, cors_origins: list[str] | None) -> None:
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)
    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)

    @app.middleware("http")
    async def check_api_key_and_count(request: Request, call_next: Any) -> Any:
        if api_key and request.url.path.startswith("/v1/") and \
                request.headers.get("authorization", "") != f"Bearer {api_key}":
            metrics.errors.labels("authentication_error").inc()
            response = error_response(401, "Invalid or missing API key (Authorization: Bearer <key>).",
                                      kind="authentication_error", code="invalid_api_key")
        else:
            response = await call_next(request)
        route = request.scope.get("route")
        metrics.requests.labels(getattr(route, "path", "unmatched"), str(response.status_code)).inc()
        return response


def _add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        metrics.errors.labels(exc.kind).inc()
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.errors.labels("invalid_request_error").inc()
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:])
        return error_response(422, f"{where}: {first.get('msg', 'invalid request')}" if where else str(exc),
                              param=where or None)


class ChatCompletions:
    """POST /v1/chat/completions: the request through the loaded client, answered whole or as an SSE stream."""

    def __init__(self, holder: ModelHolder, metrics: ServerMetrics, default_max_tokens: int) -> None:
        self.holder, self.metrics, self.default_max_tokens = holder, metrics, default_max_tokens

    async def create(self, body: ChatRequest) -> Any:
        client = self.holder.require()
        if body.model != self.holder.served_name:
            raise APIError(404, f"The model {body.model!r} does not exist here; this server serves "
                                f"{self.holder.served_name!r}.", param="model", code="model_not_found")
        api.check_supported(body)
        params = api.generation_params(body, client.generation_defaults, self.default_max_tokens)
        tools, response_format, messages = api.tool_request(body), api.response_format(body), api.messages(body)
        started = time.perf_counter()
        cancel = threading.Event()
        pump = DeltaPump(client.stream(messages, params, cancel, tools, response_format), cancel)
        self.metrics.in_progress.inc()
        try:
            # The first delta before answering: a request that cannot be served is an HTTP error, not a broken
            # stream.
            first = await pump.next()
        except BaseException:
            self._done(pump, None, "error", started)
            raise
        reply = Reply(model=self.holder.served_name or "")
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventSourceResponse(self._events(pump, first, reply, include_usage, started), sep="\n", ping=15)
        ended = "cancelled"
        try:
            item = first
            while item is not None:
                reply.add(item)
                item = await pump.next()
            ended = finish_reason(reply.last)
        finally:
            self._done(pump, reply, ended, started)
        return reply.completion()

    async def _events(self, pump: DeltaPump, first: Delta | None, reply: Reply, include_usage: bool,
                      started: float) -> AsyncIterator[dict[str, str]]:
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
                    item = await pump.next()
                except APIError as exc:  # the backend failed mid-stream: say so in the stream, as vLLM does
                    ended = "error"
                    self.metrics.errors.labels("server_error").inc()
                    yield {"data": json.dumps({"error": {"message": exc.message, "type": "server_error",
                                                         "param": None, "code": None}})}
                    return
            ended = finish_reason(reply.last)
            yield _event(reply.chunk(ChoiceDelta(), finish=ended))
            if include_usage:
                yield _event(reply.chunk(usage=reply.usage()))
            yield {"data": "[DONE]"}
        finally:
            self._done(pump, reply, ended, started)

    def _done(self, pump: DeltaPump, reply: Reply | None, ended: str, started: float) -> None:
        pump.cancel.set()  # a no-op after a complete reply; otherwise it stops the generation
        self.metrics.in_progress.dec()
        if reply is not None:
            self.metrics.record_answer(reply.metrics, ended, time.perf_counter() - started)


def _event(chunk: ChatCompletionChunk) -> dict[str, str]:
    return {"data": chunk.model_dump_json(exclude_unset=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible API over the demo's backends.")
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
    args = parser.parse_args()
    offline_by_default()
    import uvicorn

    settings = ModelSettings(**{**defaults.__dict__, "backend": args.backend, "model_path": args.model})
    origins = [origin.strip() for origin in args.cors_origins.split(",") if origin.strip()]
    app = create_app(settings=settings, served_name=args.served_model_name, api_key=args.api_key,
                     cors_origins=origins)
    print(f"Serving the OpenAI-compatible API on http://{args.host}:{args.port}/v1 (model loads in the background; "
          "GET /health says when it is ready)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
