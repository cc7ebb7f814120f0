"""OpenAI-compatible HTTP API over the same core: `make serve` (or `python -m app.server --help`).

One loaded backend (transformers, vLLM or another OpenAI server) serves every request; prompts, tool-call
dialects, forced calls and parsing are the clients' own, so the API behaves exactly like the app. Streaming
follows OpenAI's SSE format (role first, content deltas, tool calls as `delta.tool_calls`, finish reason, usage
when asked, `[DONE]`); a client that disconnects cancels its generation.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from app.clients.base import Client, ClientError, Delta, GenerationParams, ToolRequest
from app.clients.registry import create_client
from app.config import ModelSettings, offline_by_default
from app.conversation import Conversation
from app.generation_defaults import GenerationDefaults

MAX_BODY_BYTES = 4 * 1024 * 1024
# Fields the API accepts without acting on them (they change nothing for a single local model).
_HARMLESS_FIELDS = {"user", "metadata", "store", "parallel_tool_calls", "service_tier"}


class APIError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.kind, self.param, self.code)


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None) -> JSONResponse:
    """OpenAI's error shape, which the SDKs turn into their typed exceptions."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route can give."""
    return {status: {"model": ErrorBody} for status in statuses}


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    # Left out: the model's own defaults (app/generation_defaults.py), as vLLM's server does.
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=5.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: bool = False
    response_format: dict[str, Any] | None = None


def _check_supported(request: ChatRequest) -> None:
    """Say no, clearly, to what this server does not do, instead of silently ignoring it."""
    if request.n != 1:
        raise APIError(400, "n > 1 is not supported: ask for one choice per request.", param="n")
    if request.logprobs:
        raise APIError(400, "logprobs are not supported by this server.", param="logprobs")
    if request.frequency_penalty or request.presence_penalty:
        raise APIError(400, "frequency_penalty and presence_penalty are not supported; use repetition_penalty.",
                       param="frequency_penalty" if request.frequency_penalty else "presence_penalty")
    if request.response_format and request.response_format.get("type") not in (None, "text"):
        raise APIError(400, "response_format json_object / json_schema is not supported by this server yet.",
                       param="response_format")
    unknown = sorted(set(request.model_extra or {}) - _HARMLESS_FIELDS)
    if unknown:
        raise APIError(400, f"Unsupported field(s): {', '.join(unknown)}.", param=unknown[0])


def _generation_params(request: ChatRequest, defaults: GenerationDefaults, default_max_tokens: int) -> GenerationParams:
    """The request's sampling settings; those it leaves out come from the model's defaults."""
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    try:
        return defaults.params(
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            repetition_penalty=request.repetition_penalty,
            max_new_tokens=request.max_completion_tokens or request.max_tokens or default_max_tokens,
            stop=stop,
            seed=request.seed,
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from exc


def _tool_request(request: ChatRequest) -> ToolRequest | None:
    if not request.tools:
        if request.tool_choice not in (None, "none", "auto"):
            raise APIError(400, "tool_choice needs tools.", param="tool_choice")
        return None
    for tool in request.tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
            raise APIError(400, 'Each tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}.',
                           param="tools")
        function.setdefault("parameters", {"type": "object", "properties": {}})
    choice = request.tool_choice or "auto"
    if isinstance(choice, dict):
        choice = (choice.get("function") or {}).get("name") or ""
    try:
        return ToolRequest(tools=tuple(request.tools), choice=choice)
    except ValueError as exc:
        raise APIError(400, str(exc), param="tool_choice") from exc


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    try:
        return [message.to_openai() for message in Conversation.from_openai(request.messages).messages]
    except ValueError as exc:
        raise APIError(400, f"Invalid messages: {exc}", param="messages") from exc


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
    path = getattr(client, "model_path", None)
    return path.name if path is not None else getattr(client, "model", client.backend)


def create_app(settings: ModelSettings | None = None, client: Client | None = None, served_name: str | None = None,
               api_key: str | None = None, cors_origins: list[str] | None = None,
               default_max_tokens: int = 1024) -> FastAPI:
    """The API app. Pass `client` to serve an already loaded backend (tests), or `settings` to load one."""
    holder = ModelHolder(settings, client, served_name)
    app = FastAPI(title="Composite LLM demo API", version="1.0",
                  description="OpenAI-compatible chat completions with tool calls.")
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)
    app.add_middleware(BodySizeLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ())[1:])
        return error_response(422, f"{where}: {first.get('msg', 'invalid request')}" if where else str(exc),
                              param=where or None)

    @app.middleware("http")
    async def check_api_key(request: Request, call_next: Any) -> Any:
        if api_key and request.url.path.startswith("/v1/"):
            if request.headers.get("authorization", "") != f"Bearer {api_key}":
                return error_response(401, "Invalid or missing API key (Authorization: Bearer <key>).",
                                      kind="authentication_error", code="invalid_api_key")
        return await call_next(request)

    @app.get("/health", responses={503: {"description": "The model is loading or failed to load."}})
    async def health() -> JSONResponse:
        status = "ok" if holder.client else ("error" if holder.error else "loading")
        body = {"status": status, "model": holder.served_name, "error": holder.error}
        return JSONResponse(body, status_code=200 if holder.client else 503)

    @app.get("/v1/models", responses=_errors(401, 413, 503))
    async def models() -> dict[str, Any]:
        holder.require()
        return {"object": "list", "data": [{"id": holder.served_name, "object": "model", "created": 0,
                                            "owned_by": "composite-demo"}]}

    @app.post("/v1/chat/completions", response_model=None, responses=_errors(400, 401, 404, 413, 422, 503))
    async def chat(body: ChatRequest, request: Request) -> Any:
        client = holder.require()
        if body.model != holder.served_name:
            raise APIError(404, f"The model {body.model!r} does not exist here; this server serves "
                                f"{holder.served_name!r}.", param="model", code="model_not_found")
        _check_supported(body)
        params = _generation_params(body, client.generation_defaults, default_max_tokens)
        tools = _tool_request(body)
        messages = _messages(body)
        cancel = threading.Event()
        deltas = client.stream(messages, params, cancel, tools)
        # The first delta before answering: a prompt that cannot be served is an HTTP error, not a broken stream.
        first = await _next_delta(deltas)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(
                _sse(request, deltas, first, cancel, completion_id, created, holder.served_name, include_usage),
                media_type="text/event-stream",
            )
        return await _complete(deltas, first, completion_id, created, holder.served_name)

    return app


_END = object()


async def _next_delta(deltas: Iterator[Delta]) -> Any:
    try:
        return await run_in_threadpool(next, deltas, _END)
    except ClientError as exc:
        raise APIError(400, str(exc)) from exc


def _usage(delta: Delta | None) -> dict[str, int]:
    metrics = delta.metrics if delta is not None else None
    prompt = metrics.prompt_tokens if metrics else 0
    completion = metrics.completion_tokens if metrics else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _finish_reason(delta: Delta) -> str:
    return {"tool_calls": "tool_calls", "length": "length"}.get(delta.finish_reason or "", "stop")


async def _complete(deltas: Iterator[Delta], first: Any, completion_id: str, created: int, model: str) -> dict:
    text: list[str] = []
    last: Delta | None = None
    item = first
    while item is not _END:
        last = item
        text.append(item.text)
        item = await _next_delta(deltas)
    calls = [call.to_openai() for call in (last.tool_calls if last else [])]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(last) if last else "stop",
                         "logprobs": None}],
            "usage": _usage(last)}


async def _sse(request: Request, deltas: Iterator[Delta], first: Any, cancel: threading.Event, completion_id: str,
               created: int, model: str, include_usage: bool) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None, usage: dict | None = None) -> str:
        choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                                 "logprobs": None}]
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    last: Delta | None = None
    item = first
    next_check = time.monotonic()
    try:
        while item is not _END:
            last = item
            if item.text:
                yield chunk({"content": item.text})
            if time.monotonic() >= next_check:  # a few times a second is enough, and cheaper than per token
                next_check = time.monotonic() + 0.25
                if await request.is_disconnected():
                    cancel.set()  # the client left: stop generating for nobody
                    return
            try:
                item = await run_in_threadpool(next, deltas, _END)
            except ClientError as exc:
                error = {"message": str(exc), "type": "server_error", "param": None, "code": None}
                yield f"data: {json.dumps({'error': error})}\n\n"
                return
        if last is not None and last.tool_calls:
            calls = [{"index": i, **call.to_openai()} for i, call in enumerate(last.tool_calls)]
            yield chunk({"tool_calls": calls})
        yield chunk({}, _finish_reason(last) if last else "stop")
        if include_usage:
            yield chunk({}, usage=_usage(last))
        yield "data: [DONE]\n\n"
    finally:
        cancel.set()
        await run_in_threadpool(deltas.close)


def main() -> None:
    parser = argparse.ArgumentParser(description="OpenAI-compatible API over the demo's backends.")
    defaults = ModelSettings.from_env()
    parser.add_argument("--backend", default=defaults.backend, help="hf, vllm or openai (default: %(default)s)")
    parser.add_argument("--model", default=defaults.model_path, help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--served-model-name", default=None, help="the model id clients use (default: folder name)")
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=os.environ.get("DEMO_SERVER_API_KEY"),
                        help="require this key as a Bearer token (env DEMO_SERVER_API_KEY)")
    parser.add_argument("--cors-origins", default=os.environ.get("DEMO_SERVER_CORS_ORIGINS", ""),
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
