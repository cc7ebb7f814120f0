"""POST /v1/chat/completions: a chat request through the loaded client, answered whole or streamed.

Prompts, tool-call dialects, forced calls, response formats and parsing are the clients' own, so the endpoint
behaves exactly like the app. Streams are Server-Sent Events through sse-starlette in OpenAI's format: the role
first, content deltas and `delta.tool_calls` pieces as they are generated (name first, then argument text), the
finish reason, usage when asked, `[DONE]`. Conversations over the message and character limits are refused before
any model work; a client that disconnects, streaming or not, cancels its generation.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from app.clients.client_protocol import Delta
from app.config import ImageSettings, RequestLimits
from app.frontends.api.api_errors import documented_errors
from app.frontends.api.chat_completions import chat_protocol as protocol
from app.frontends.api.chat_completions.chat_answers import Reply, finish_reason
from app.frontends.api.chat_completions.chat_protocol import APIError, ChatRequest, error_response
from app.frontends.api.generations import Generations, InFlight

log = logging.getLogger(__name__)

# One Server-Sent Event of a streamed completion (OpenAPI before 3.2 describes a stream by its events).
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "data": {"type": "string",
             "description": "A chat.completion.chunk as JSON, an {\"error\": ...} object, or [DONE]."},
    "event": {"type": "string"}, "id": {"type": "string"}, "retry": {"type": "integer"}}}


class ChatCompletions:
    """The chat completions endpoint: every request through the loaded client (`generations`)."""

    def __init__(self, generations: Generations, default_max_tokens: int, limits: RequestLimits) -> None:
        self.generations, self.default_max_tokens, self.limits = generations, default_max_tokens, limits

    def register(self, app: FastAPI) -> None:
        """Add the route, with its answers documented, to `app`."""
        answer = {"content": {"text/event-stream": {"schema": _SSE_EVENT}},
                  "description": "The completion, or with stream=true its chunks as Server-Sent Events."}
        app.post("/v1/chat/completions", response_model=ChatCompletion, response_model_exclude_unset=True,
                 responses={200: answer, **documented_errors(400, 401, 404, 413, 422, 503)})(self.create)

    async def create(self, body: ChatRequest, request: Request) -> Any:
        protocol.check_size(body, self.limits.max_messages, self.limits.max_chars)
        client = self.generations.client_for(body.model)
        protocol.check_supported(body)
        params = protocol.generation_params(body, client.generation_defaults, self.default_max_tokens)
        # Validating schemas against the meta-schema is pure Python (up to a few tenths of a second): off the loop.
        tools = await run_in_threadpool(protocol.tool_request, body)
        response_format = await run_in_threadpool(protocol.response_format, body)
        # Images are decoded (and http(s) ones fetched, where allowed) off the event loop.
        messages = await run_in_threadpool(protocol.messages, body, protocol.image_fetcher(ImageSettings.from_env()))
        flight, first = await self.generations.start(
            request, lambda cancel: client.stream(messages, params, cancel, tools, response_format), params=params)
        reply = Reply(model=body.model)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return EventSourceResponse(self._events(flight, first, reply, include_usage), sep="\n", ping=15)
        return await self._whole(flight, first, reply)

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
        except Exception:  # the backend failed: an error, not a cancellation, in the metrics and the trace
            if not flight.stopped:  # the server shutting down cancels
                ended = "error"
            raise
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
                    self.generations.metrics.errors.labels("server_error").inc()
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
        self.generations.done(flight, reply.metrics if reply is not None else None, ended)


def _event(chunk: ChatCompletionChunk) -> dict[str, str]:
    return {"data": chunk.model_dump_json(exclude_unset=True)}


def _error_event(message: str) -> dict[str, str]:
    return {"data": json.dumps({"error": {"message": message, "type": "server_error", "param": None, "code": None}})}
