"""OpenAI-compatible HTTP API over the same core: `make serve` (or `python -m app.frontends.api --help`).

`create_app` builds the app from one `ServerSettings`: one loaded backend (transformers, vLLM or another OpenAI
server) serves every request; each endpoint family is a module of its own
(app/frontends/api/chat_completions/chat_serving.py, app/frontends/api/responses/responses_serving.py,
app/frontends/api/completions/completions_serving.py), registered here, next to /health, /metrics (Prometheus' format)
and /v1/models, and all generate through one `Generations` (app/frontends/api/generations.py). Requests and answers are
typed (pydantic request models, `openai.types` answers).

No client can hold the model or the process: a connection whose request headers or body do not arrive in time is
closed (app/limits/http_timeouts.py); bodies over 4 MB and conversations over the message and character
limits are refused before any model work (app/frontends/api/middleware.py, the endpoints); a client that disconnects
cancels its generation; on shutdown every generation is cancelled. Every error, whatever failed, is answered in
OpenAI's error shape without server internals (app/frontends/api/api_errors.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from openai.types import Model

from app.clients.choice import default_backend
from app.clients.client_protocol import Client
from app.config import HTTPTimeouts, ServerSettings, comma_list, offline_by_default, read_key_file
from app.frontends.api.api_errors import add_error_handlers, documented_errors
from app.frontends.api.chat_completions.chat_protocol import ModelList
from app.frontends.api.chat_completions.chat_serving import ChatCompletions
from app.frontends.api.completions.completions_serving import Completions
from app.frontends.api.embeddings.embeddings_serving import EmbeddingsEndpoint
from app.frontends.api.generations import Generations
from app.frontends.api.knowledge.knowledge_serving import KnowledgeEndpoints
from app.frontends.api.metrics import ServerMetrics
from app.frontends.api.middleware import add_middleware
from app.frontends.api.model_holder import ModelHolder
from app.frontends.api.responses.responses_serving import Responses
from app.knowledge.embeddings import Embedder
from app.knowledge.vector_stores import VectorStores
from app.limits.http_timeouts import uvicorn_options
from app.storage import open_database
from app.storage.responses import ResponseStore
from app.telemetry.setup import configure_tracing, exporting


def create_app(settings: ServerSettings, client: Client | None = None,
               response_store: ResponseStore | None = None, vector_stores: VectorStores | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    """The API app. It loads `settings.model` at start-up, in the background, unless handed an already loaded
    `client` (tests, benchmarks) to serve instead. Stored responses, files and vector stores go to the configured
    database (opened at their first use) unless `response_store` and `vector_stores` are given; /v1/embeddings uses
    `embedder`, else DEMO_EMBEDDING_MODEL's (loaded at its first use)."""
    holder = ModelHolder(settings.model, client, settings.served_name)
    metrics = ServerMetrics()
    metrics.watch_model(lambda: holder.client.activity() if holder.client is not None else None)
    # One object per endpoint family; a new family is built and registered alongside, and cancelled on shutdown.
    generations = Generations(holder, metrics, settings.max_generations)
    chat = ChatCompletions(generations, settings.default_max_tokens, settings.limits)
    text_completions = Completions(generations, settings.default_max_tokens, settings.limits)
    knowledge = KnowledgeEndpoints(settings.api_key, (lambda: vector_stores) if vector_stores is not None else None)
    responses = Responses(generations, (lambda: response_store) if response_store is not None
                          else (lambda: ResponseStore(open_database())), settings.default_max_tokens, settings.limits,
                          knowledge.search_stores)
    embeddings = EmbeddingsEndpoint((lambda: embedder) if embedder is not None else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        generations.cancel_all()  # whatever is still generating must not keep the process alive

    app = FastAPI(title="Composite LLM demo API", version="1.0", lifespan=lifespan,
                  description="OpenAI-compatible chat completions, responses and text completions, with tool "
                              "calls and structured output.")
    add_middleware(app, metrics, settings.api_key, settings.cors_origins)
    configure_tracing()
    if exporting():  # a server span per request, the parent of its model calls' (OpenTelemetry's own middleware)
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        # Without its per-chunk "http send" spans: a streamed answer would be thousands of them.
        FastAPIInstrumentor.instrument_app(app, excluded_urls="health,metrics", exclude_spans=["send", "receive"])
    add_error_handlers(app, metrics)

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

    @app.get("/v1/models", response_model=ModelList, responses=documented_errors(401, 413, 503))
    async def models() -> ModelList:
        client = holder.require()
        # max_model_len is an extra field (vLLM's), which the model keeps but its constructor's types do not name.
        return ModelList(data=[Model.model_validate({
            "id": holder.served_name or "", "object": "model", "created": 0, "owned_by": "composite-demo",
            "max_model_len": client.capabilities.context_window})])

    chat.register(app)
    responses.register(app)
    text_completions.register(app)
    knowledge.register(app)
    embeddings.register(app)
    return app


def command_line_settings(argv: list[str] | None = None) -> ServerSettings:
    """The server's settings: those of the environment (app/config.py), as the command line overrides them."""
    env = ServerSettings.from_env(default_backend)
    parser = argparse.ArgumentParser(prog="python -m app.frontends.api",
                                     description="OpenAI-compatible API over the demo's backends.")
    parser.add_argument("--backend", default=None,
                        help="hf, llamacpp, vllm or openai (default: DEMO_BACKEND, else llama.cpp on a CPU where it "
                             "runs and the model is a GGUF, transformers otherwise)")
    parser.add_argument("--model", default=env.model.model_path, help="local model folder (default: embedded SmolLM2)")
    parser.add_argument("--served-model-name", default=env.served_name,
                        help="the model id clients use (default: folder name)")
    parser.add_argument("--host", default=env.host)
    parser.add_argument("--port", type=int, default=env.port)
    parser.add_argument("--api-key", default=None,
                        help="require this key as a Bearer token; prefer DEMO_SERVER_API_KEY or --api-key-file: a "
                             "command line can be read by every user of the machine (ps)")
    parser.add_argument("--api-key-file", metavar="PATH",
                        help="require the key this file holds as a Bearer token (chmod 600 it)")
    parser.add_argument("--cors-origins", default=",".join(env.cors_origins),
                        help="comma-separated browser origins allowed to call the API (default: none)")
    parser.add_argument("--max-messages", type=int, default=env.limits.max_messages,
                        help="most messages in one request (env DEMO_SERVER_MAX_MESSAGES, default: %(default)s)")
    parser.add_argument("--max-chars", type=int, default=env.limits.max_chars,
                        help="most characters of text in one request's messages (env DEMO_SERVER_MAX_CHARS, "
                             "default: %(default)s)")
    args = parser.parse_args(argv)
    api_key = env.api_key
    if args.api_key_file:
        try:
            api_key = read_key_file(Path(args.api_key_file).expanduser())
        except ValueError as exc:
            parser.error(str(exc))
    elif args.api_key is not None:
        print("Warning: --api-key shows the key to every user of this machine (ps, /proc/PID/cmdline); set "
              "DEMO_SERVER_API_KEY or give --api-key-file instead.", file=sys.stderr)
        api_key = args.api_key
    backend = args.backend or default_backend(args.model)
    return replace(env, model=replace(env.model, backend=backend, model_path=args.model),
                   served_name=args.served_model_name, host=args.host, port=args.port, api_key=api_key or None,
                   cors_origins=comma_list(args.cors_origins),
                   limits=replace(env.limits, max_messages=args.max_messages, max_chars=args.max_chars))


def main() -> None:
    """`python -m app.frontends.api`: serve the API with uvicorn until SIGTERM."""
    settings = command_line_settings()
    offline_by_default()
    import uvicorn

    app = create_app(settings)
    print(f"Serving the OpenAI-compatible API on http://{settings.host}:{settings.port}/v1 (model loads in the "
          "background; GET /health says when it is ready)")
    # On SIGTERM, requests still running after the timeout are cancelled, and with them their generations.
    # Connections that never finish sending a request are closed (app/limits/http_timeouts.py).
    # uvicorn waits any number of seconds (asyncio.wait_for), though its annotation says int.
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                timeout_graceful_shutdown=settings.shutdown_timeout_s,  # type: ignore[arg-type]
                **uvicorn_options(HTTPTimeouts.from_env()))
