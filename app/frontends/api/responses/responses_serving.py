"""The Responses API: POST /v1/responses (whole or streamed as typed events), and the stored responses behind
`previous_response_id`: GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items.

A request becomes chat messages (app/frontends/api/responses/responses_protocol.py) and goes through the same generation
path as a chat completion (`Generations`, the client's `stream`); its answer is built by
app/frontends/api/responses/responses_output.py. Responses are stored (`store`, true unless the client says otherwise,
as OpenAI's API does) in the project's database (app/storage/responses.py), each under its owner: a hash of the API key
that made it, so that a key sees only its own responses; they are kept for DEMO_RESPONSES_RETENTION_DAYS (30 by default;
0 stores nothing).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from openai.types.responses import Response, ResponseStreamEvent, Tool
from pydantic import BaseModel, TypeAdapter, ValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from app.clients.client_protocol import Delta
from app.config import ImageSettings, RequestLimits
from app.domain.chat_messages import ChatMessage
from app.domain.conversation import Attachment, Conversation
from app.frontends.api.api_errors import documented_errors
from app.frontends.api.chat_completions import chat_protocol as protocol
from app.frontends.api.chat_completions.chat_answers import finish_reason
from app.frontends.api.chat_completions.chat_protocol import APIError, error_response
from app.frontends.api.generations import Generations, InFlight
from app.frontends.api.lazy_open import LazyOpen
from app.frontends.api.responses import file_search as fs
from app.frontends.api.responses import responses_protocol as rp
from app.frontends.api.responses.responses_output import ResponseOutput, new_id
from app.knowledge.vector_stores import SearchResult
from app.storage import StorageError
from app.storage.responses import ResponseChainTooLarge, ResponseChainTooLong, ResponseNotFound, ResponseStore

log = logging.getLogger(__name__)

_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "event": {"type": "string", "description": "The event's type, as in its data."},
    "data": {"type": "string", "description": "One Responses API streaming event as JSON (response.created, "
                                              "response.output_text.delta, ..., response.completed)."}}}
_ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
                "file_search_call": "fs"}
# Retrieved passages take at most half the context window, counted at this many characters a token (English text
# runs 4 to 5 in the tokenizers of small models): the question, the history and the answer keep the rest.
_CHARS_PER_TOKEN = 4


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool


# (vector store ids, query, how many, score threshold) -> the best passages: the vector stores' search
SearchStores = Callable[[list[str], str, int, float | None], Awaitable[list[SearchResult]]]


class Responses:
    """The Responses endpoints over the loaded client (`generations`), the stored responses (`open_store`, opened
    at the first use: a server whose database is down still answers requests that store nothing) and the vector
    stores that the file_search tool searches (`search_stores`)."""

    def __init__(self, generations: Generations, open_store: Callable[[], ResponseStore], default_max_tokens: int,
                 limits: RequestLimits, search_stores: SearchStores) -> None:
        self.generations, self.default_max_tokens, self.limits = generations, default_max_tokens, limits
        self.search_stores = search_stores
        self._store = LazyOpen(open_store, lambda _: (
            "Stored responses are unavailable: the server cannot open its database. Send store=false with the whole "
            "conversation as input."), (StorageError,))

    def register(self, app: FastAPI) -> None:
        answer = {"content": {"text/event-stream": {"schema": _SSE_EVENT}},
                  "description": "The response, or with stream=true its events as Server-Sent Events."}
        app.post("/v1/responses", response_model=Response, response_model_exclude_unset=True,
                 responses={200: answer, **documented_errors(400, 401, 404, 413, 422, 503)})(self.create)
        app.get("/v1/responses/{response_id}", response_model=Response, response_model_exclude_unset=True,
                responses=documented_errors(401, 404, 503))(self.retrieve)
        app.delete("/v1/responses/{response_id}", response_model=DeletedResponse,
                   responses=documented_errors(401, 404, 503))(self.delete)
        app.get("/v1/responses/{response_id}/input_items", response_model=InputItemList,
                responses=documented_errors(401, 404, 503))(self.list_input_items)

    # ----- POST /v1/responses ------------------------------------------------------------------------------------

    async def create(self, body: rp.ResponsesRequest, request: Request) -> Any:
        client = self.generations.client_for(body.model)
        rp.check_supported(body)
        owner = _owner(request)
        store = await self._store_for(body) if body.store or body.previous_response_id else None
        # Agents (Codex CLI) send no max_output_tokens and treat an answer cut short as a failed turn: without one,
        # the answer may take what the context window leaves, as OpenAI's API and vLLM's allow.
        params = rp.generation_params(body, client.generation_defaults,
                                      client.capabilities.context_window or self.default_max_tokens)
        tools = await run_in_threadpool(rp.tools, body)
        search = fs.file_search(body.tools, body.tool_choice, body.include)
        response_format = await run_in_threadpool(rp.response_format, body)
        given = rp.input_items(body)
        self._check_items(len(given))  # before anything is loaded or converted
        earlier = await run_in_threadpool(self._history, store, owner, body.previous_response_id)
        self._check_items(len(earlier) + len(given))
        chat = rp.chat_messages(body.instructions, [*earlier, *given], tools)
        # Echoed file_search_call items are not read, but they are stored: their text counts as well.
        unread = protocol.text_chars([item for item in given if item.get("type") == "file_search_call"])
        self._check_size(chat, unread)
        items = [_with_id(rp.stored_item(item)) for item in given]  # checked by chat_messages: schema fields only
        window = client.capabilities.context_window or self.default_max_tokens
        budget = min(window // 2 * _CHARS_PER_TOKEN, self.limits.max_chars - protocol.text_chars(chat) - unread)
        searched = await self._search(search, chat, budget) if search is not None else None
        messages = await run_in_threadpool(_checked_messages, chat, fs.passages(searched[1]) if searched else None)
        output = ResponseOutput(body.model, _settings(body), tools,
                                summarize=bool(body.reasoning and body.reasoning.summary), searched=searched,
                                show_results=search is not None and search.include_results)
        flight, first = await self.generations.start(
            request, lambda cancel: client.stream(messages, params, cancel, tools.request, response_format),
            params=params)

        def keep() -> None:
            if store is not None and body.store:
                self._save(store, owner, output, items, body.previous_response_id)

        if body.stream:
            return EventSourceResponse(self._events(flight, first, output, keep), sep="\n", ping=15)
        return await self._whole(flight, first, output, keep)

    async def _whole(self, flight: InFlight, first: Delta | None, output: ResponseOutput,
                     keep: Callable[[], None]) -> Any:
        ended, last = "cancelled", None
        try:
            item = first
            while item is not None:
                output.add(item)
                last = item
                item = await flight.pump.next()
            if flight.client_left:
                return error_response(499, "The client closed the request.", kind="client_closed_request")
            if flight.stopped:
                raise APIError(503, "The server is shutting down.", kind="service_unavailable")
            output.finish(last)
            ended = finish_reason(last)
        except Exception:  # the backend failed: an error, not a cancellation, in the metrics and the trace
            if not flight.stopped:  # the server shutting down cancels
                ended = "error"
            raise
        finally:
            self.generations.done(flight, output.metrics, ended)
        await run_in_threadpool(keep)
        return _json(output.response())

    async def _events(self, flight: InFlight, first: Delta | None, output: ResponseOutput,
                      keep: Callable[[], None]) -> AsyncIterator[dict[str, str]]:
        ended, last = "cancelled", None
        try:
            for event in output.started():
                yield _event(event)
            item = first
            while item is not None:
                last = item
                for event in output.add(item):
                    yield _event(event)
                try:
                    item = await flight.pump.next()
                except Exception as exc:  # the backend failed mid-stream: the response fails, in the stream
                    ended = "error"
                    self.generations.metrics.errors.labels("server_error").inc()
                    if not isinstance(exc, APIError):
                        log.exception("Streaming a response failed")
                    for event in output.fail(exc.message if isinstance(exc, APIError)
                                             else "Generating the answer failed."):
                        yield _event(event)
                    return
            if flight.stopped:
                if not flight.client_left:
                    for event in output.fail("The generation was cancelled: the server is shutting down."):
                        yield _event(event)
                return
            closing = output.finish(last)
            ended = finish_reason(last)
            await run_in_threadpool(keep)  # stored before the client hears it is complete, so a GET finds it
            for event in closing:
                yield _event(event)
        finally:
            self.generations.done(flight, output.metrics, ended)

    async def _search(self, search: fs.FileSearch, chat: list[dict[str, Any]], budget_chars: int
                      ) -> tuple[str, list[SearchResult]] | None:
        """The file_search, before the answer: its query (the last user message) and the best passages found, as
        many as fit in `budget_chars` (those are all the response reports, so [n] always names one the model
        read); None when there is no question to search for."""
        query = fs.question(chat)
        if not query:
            if search.forced:
                raise APIError(400, "tool_choice asks for a file_search, and the last user message has no text to "
                                    "search for.", param="tool_choice")
            return None
        try:
            found = await self.search_stores(search.vector_store_ids, query, search.max_results,
                                             search.score_threshold)
        except APIError as exc:
            if exc.status == 404:
                raise APIError(404, f"{search.param}.vector_store_ids: {exc.message}",
                               param=f"{search.param}.vector_store_ids", code="not_found") from exc
            raise
        return query, fs.fitting(found, budget_chars)

    def _check_items(self, count: int) -> None:
        """413 for more input items (the earlier responses' included) than the limit on messages: items that make
        no message of their own (function calls join one) would otherwise be unbounded."""
        if count > self.limits.max_messages:
            raise APIError(413, f"The input has {count} items, the previous responses' included; this server takes "
                                f"at most {self.limits.max_messages} per request.", param="input",
                           code="request_too_large")

    def _check_size(self, messages: list[dict[str, Any]], unread_chars: int = 0) -> None:
        if len(messages) > self.limits.max_messages:
            raise APIError(413, f"The input makes {len(messages)} messages; this server takes at most "
                                f"{self.limits.max_messages} per request.", param="input", code="request_too_large")
        chars = protocol.text_chars(messages) + unread_chars
        if chars > self.limits.max_chars:
            raise APIError(413, f"The input holds {chars} characters of text; this server takes at most "
                                f"{self.limits.max_chars} per request.", param="input", code="request_too_large")

    # ----- stored responses --------------------------------------------------------------------------------------

    async def retrieve(self, response_id: str, request: Request) -> Any:
        stored = await run_in_threadpool(self._require_store().get, _owner(request), response_id)
        if stored is None:
            raise _not_found(response_id)
        return stored.response

    async def delete(self, response_id: str, request: Request) -> DeletedResponse:
        deleted = await run_in_threadpool(self._require_store().delete, _owner(request), response_id)
        if not deleted:
            raise _not_found(response_id)
        return DeletedResponse(id=response_id)

    async def list_input_items(self, response_id: str, request: Request, after: str | None = None,
                               limit: int = Query(20, ge=1, le=100),
                               order: Literal["asc", "desc"] = "desc") -> InputItemList:
        page = await run_in_threadpool(self._require_store().input_items, _owner(request), response_id, after, limit,
                                       order)
        if page is None:
            raise _not_found(response_id)
        data, has_more = page
        return InputItemList(data=data, first_id=data[0].get("id") if data else None,
                             last_id=data[-1].get("id") if data else None, has_more=has_more)

    async def _store_for(self, body: rp.ResponsesRequest) -> ResponseStore | None:
        """The store a request needs (None: storing is off and it continues nothing); 503 when it cannot be had."""
        store = await run_in_threadpool(self._require_store)
        if not store.enabled:
            if body.previous_response_id:
                raise APIError(400, "previous_response_id needs stored responses, which this server keeps none of "
                                    "(DEMO_RESPONSES_RETENTION_DAYS=0): send the whole conversation as input.",
                               param="previous_response_id")
            return None
        return store

    def _require_store(self) -> ResponseStore:
        return self._store.get()

    @staticmethod
    def _history(store: ResponseStore | None, owner: str, previous: str | None) -> list[dict[str, Any]]:
        if previous is None or store is None:
            return []
        try:
            return store.history(owner, previous)
        except ResponseNotFound as exc:
            raise APIError(404, f"Previous response with id {previous!r} not found (or a response it continues was "
                                "deleted or has expired).", param="previous_response_id") from exc
        except (ResponseChainTooLong, ResponseChainTooLarge) as exc:
            raise APIError(400, f"Previous response {previous!r} cannot be continued: {exc}.",
                           param="previous_response_id") from exc
        except StorageError as exc:
            raise APIError(503, f"Stored responses are unavailable: {exc}", kind="service_unavailable") from exc

    @staticmethod
    def _save(store: ResponseStore, owner: str, output: ResponseOutput, items: list[dict[str, Any]],
              previous: str | None) -> None:
        try:
            store.save(owner, _json(output.response()), items, previous)
        except (StorageError, ValueError):  # the client still gets the answer; only a later GET will not
            log.exception("Storing response %s failed", output.id)


def _owner(request: Request) -> str:
    """Whose responses these are: a hash of the API key the request came with ("" for none). The key itself is
    never stored."""
    authorization = request.headers.get("authorization", "")
    key = authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""
    return hashlib.sha256(key.encode()).hexdigest() if key else ""


def _with_id(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as stored and listed: with an id of its own."""
    if not isinstance(item, dict) or isinstance(item.get("id"), str):
        return item
    kind = item.get("type", "message")
    return {**({"type": "message"} if "type" not in item else {}), **item,
            "id": new_id(_ITEM_PREFIX.get(kind, "item") if isinstance(kind, str) else "item")}


def _settings(body: rp.ResponsesRequest) -> dict[str, Any]:
    """The Response fields that repeat the request."""
    return {"instructions": body.instructions, "tools": _echoable(body.tools or []),
            "tool_choice": body.tool_choice or "auto",
            "parallel_tool_calls": body.parallel_tool_calls is not False, "temperature": body.temperature,
            "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "previous_response_id": body.previous_response_id, "metadata": body.metadata or {},
            # Only the fields acted on: extras a client adds (verbosity...) could break the Response's types.
            "text": {"format": body.text.format.model_dump(by_alias=True, exclude_none=True)
                     if body.text and body.text.format else {"type": "text"}},
            "reasoning": body.reasoning.model_dump(include={"effort", "summary"}, exclude_none=True)
            if body.reasoning else None,
            "user": body.user,
            "store": body.store}


_TOOL = TypeAdapter(Tool)


def _echoable(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's tools as a Response repeats (and the store keeps) them: each as OpenAI's `Tool` types read it,
    with only the fields they declare (a client's extra keys are not echoed or stored). A tool the server took that
    those types do not (a namespace without a description) is left out of the echo rather than failing the
    answer."""
    kept = []
    for tool in tools:
        try:
            kept.append(_declared(_TOOL.validate_python(tool)))
        except ValidationError:
            continue
    return kept


def _declared(value: Any) -> Any:
    """`value` as JSON with only the fields its openai.types models declare, recursively: those models keep any
    extra key they are given."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return {field.alias or name: _declared(getattr(value, name))
                for name, field in fields.items() if name in value.model_fields_set}
    if isinstance(value, list | tuple):
        return [_declared(item) for item in value]
    if isinstance(value, dict):
        return {key: _declared(item) for key, item in value.items()}
    return value


def _checked_messages(messages: list[dict[str, Any]], passages: Attachment | None = None) -> list[ChatMessage]:
    """The messages checked and normalized as chat completions' are (images decoded and checked), with the
    passages a file_search found on the last user message, quoted as the Chat quotes them."""
    try:
        conversation = Conversation.from_openai(messages, protocol.image_fetcher(ImageSettings.from_env()))
        question = conversation.last_user_index()
        if passages is not None and question is not None:
            conversation.messages[question].attachments.append(passages)
        return conversation.to_openai()
    except ValueError as exc:
        raise APIError(400, f"Invalid input: {exc}", param="input") from exc
    except RecursionError as exc:
        raise APIError(400, "Invalid input: a value is nested too deeply.", param="input") from exc


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id {response_id!r} not found.", param="response_id", code="not_found")


def _json(response: Response) -> dict[str, Any]:
    return response.model_dump(mode="json", exclude_unset=True, by_alias=True)


def _event(event: ResponseStreamEvent) -> dict[str, str]:
    return {"event": event.type, "data": event.model_dump_json(exclude_unset=True, by_alias=True)}
