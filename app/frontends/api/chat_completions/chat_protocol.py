"""The API server's request model and what turns it into the core's objects (sampling settings, tools, response
format, messages), with OpenAI's error shape for everything it refuses. Responses are `openai.types.chat` models
(app/frontends/api/chat_completions/chat_answers.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from fastapi.responses import JSONResponse
from jsonschema.exceptions import SchemaError
from openai.types import Model
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.clients.client_protocol import GenerationParams, ResponseFormat, ToolRequest
from app.clients.generation_defaults import GenerationDefaults
from app.config import ImageSettings, SchemaLimits
from app.domain.chat_messages import ChatMessage
from app.domain.conversation import Conversation, ImageFetcher
from app.limits.schema_limits import schema_size_problem
from app.limits.schema_validation import check_schema
from app.tools.net_guard import fetch_guarded
from app.tools.tool_registry import ToolError

# Fields the API accepts without acting on them (they change nothing for a single local model).
_HARMLESS_FIELDS = {"user", "metadata", "store", "service_tier"}
# A seed is a signed 64-bit integer, as in OpenAI's and vLLM's APIs.
_SEED_RANGE = (-(2**63), 2**63 - 1)
IMAGE_FETCH_TIMEOUT_S = 10.0


class APIError(Exception):
    """A request the server refuses, answered in OpenAI's error shape (which the SDKs turn into typed errors)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.kind, self.param, self.code)


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status,
                        headers=headers)


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class ModelList(BaseModel):
    """GET /v1/models. Each entry also says its context window (max_model_len), as vLLM's server does."""

    object: Literal["list"] = "list"
    data: list[Model]


class FunctionDefinition(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _a_json_schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        # Only the cheap checks: this runs on the event loop. Validity against the meta-schema (pure Python, about
        # 0.2 s per 1,000 values) is `parameters_problem`, which the endpoint runs on a thread.
        problem = schema_size_problem(parameters, SchemaLimits.from_env())
        if problem:
            raise ValueError(problem)
        return parameters


def parameters_problem(parameters: dict[str, Any]) -> str | None:
    """Why a tool's `parameters` cannot be used, or None: prompts and grammars are built from them, so they must be
    a JSON Schema (`schema_problem`) whose properties are schema objects."""
    problem = schema_problem(parameters)
    if problem:
        return problem
    for name, schema in (parameters.get("properties") or {}).items():
        if not isinstance(schema, dict):
            return f"properties.{name} must be a JSON Schema object (true and false are not supported here)"
    return None


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` cannot be made into a grammar, or None: it must be within the size limits
    (app/limits/schema_limits.py: compiling a grammar grows steeply with enum values, alternatives, nesting and regex
    length; a schema 400 properties deep held a request for 10 s) and a valid JSON Schema (of the draft it names, else
    2020-12)."""
    problem = schema_size_problem(schema, SchemaLimits.from_env())
    if problem:
        return problem
    try:
        check_schema(schema)
    except SchemaError as exc:
        where = ".".join(str(part) for part in exc.path)
        return f"not a valid JSON Schema: {exc.message[:200]}" + (f" (at {where})" if where else "")
    except RecursionError:  # a backstop: the depth limit is well below Python's recursion limit
        return "the JSON Schema is nested too deeply"
    return None


class Tool(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str = Field("response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormatBody(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)  # checked by Conversation.from_openai
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    # False: at most one call per reply (left out or null: as many as the model makes, OpenAI's default).
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormatBody | None = None
    # Left out: the model's own defaults (app/clients/generation_defaults.py), as vLLM's server does.
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=5.0)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=_SEED_RANGE[0], le=_SEED_RANGE[1])
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: bool = False
    # vLLM's extension: keyword arguments for the chat template. The one a front end sends is enable_thinking.
    chat_template_kwargs: dict[str, Any] | None = None
    # vLLM's and llama-server's extension, for benchmarks: write max_tokens tokens whatever the model would end on.
    ignore_eos: bool = False


def check_size(request: ChatRequest, max_messages: int, max_chars: int) -> None:
    """413 for a conversation too long to take on: fitting it to the context costs time for every message."""
    if len(request.messages) > max_messages:
        raise APIError(413, f"The request has {len(request.messages)} messages; this server takes at most "
                            f"{max_messages} per request.", param="messages", code="request_too_large")
    chars = text_chars(request.messages)
    if chars > max_chars:
        raise APIError(413, f"The messages hold {chars} characters of text; this server takes at most {max_chars} "
                            "per request.", param="messages", code="request_too_large")


def text_chars(value: Any) -> int:
    """Characters in every string value of a JSON value but images (their data URLs have limits of their own,
    app/domain/media.py); iterative, so deep nesting cannot overflow it."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            pending.extend(v for k, v in item.items() if not (k == "image_url" and item.get("type") == "image_url"))
        elif isinstance(item, list):
            pending.extend(item)
    return total


def check_supported(request: ChatRequest) -> None:
    """Say no, clearly, to what this server does not do, instead of silently ignoring it."""
    if request.n != 1:
        raise APIError(400, "n > 1 is not supported: ask for one choice per request.", param="n")
    if request.logprobs:
        raise APIError(400, "logprobs are not supported by this server.", param="logprobs")
    if request.frequency_penalty or request.presence_penalty:
        raise APIError(400, "frequency_penalty and presence_penalty are not supported; use repetition_penalty.",
                       param="frequency_penalty" if request.frequency_penalty else "presence_penalty")
    unknown = sorted(set(request.model_extra or {}) - _HARMLESS_FIELDS)
    if unknown:
        raise APIError(400, f"Unsupported field(s): {', '.join(unknown)}.", param=unknown[0])
    template_kwargs = request.chat_template_kwargs or {}
    if set(template_kwargs) - {"enable_thinking"} or not isinstance(template_kwargs.get("enable_thinking", True), bool):
        raise APIError(400, "chat_template_kwargs takes only enable_thinking (true or false) here.",
                       param="chat_template_kwargs")


def generation_params(request: ChatRequest, defaults: GenerationDefaults, default_max_tokens: int) -> GenerationParams:
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
            thinking=(request.chat_template_kwargs or {}).get("enable_thinking"),
            ignore_eos=request.ignore_eos or None,
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from exc


def tool_request(request: ChatRequest) -> ToolRequest | None:
    """The request's tools, choice and whether calls may be parallel; 422 for parameters that are not a JSON
    Schema (checked here, on a thread, rather than while the body is parsed on the event loop: see
    FunctionDefinition)."""
    for index, tool in enumerate(request.tools or ()):
        problem = parameters_problem(tool.function.parameters)
        if problem:
            where = f"tools.{index}.function.parameters"
            raise APIError(422, f"{where}: {problem}", param=where)
    choice = request.tool_choice
    name = choice.function.name if isinstance(choice, NamedToolChoice) else (choice or "auto")
    if not request.tools:
        if name not in ("none", "auto"):
            raise APIError(400, "tool_choice needs tools.", param="tool_choice")
        return None
    try:
        return ToolRequest(tools=tuple(tool.model_dump(exclude_none=True) for tool in request.tools), choice=name,
                           parallel_calls=request.parallel_tool_calls is not False)
    except ValueError as exc:
        raise APIError(400, str(exc), param="tool_choice") from exc


def response_format(request: ChatRequest) -> ResponseFormat | None:
    body = request.response_format
    if body is None or body.type == "text":
        return None
    if body.type == "json_schema" and body.json_schema is None:
        raise APIError(400, 'response_format type json_schema needs "json_schema": {"name": ..., "schema": {...}}.',
                       param="response_format")
    schema = body.json_schema
    problem = schema_problem(schema.json_schema) if schema and body.type == "json_schema" else None
    if problem:
        raise APIError(400, f"response_format.json_schema.schema: {problem}", param="response_format")
    return ResponseFormat(body.type, schema.json_schema if schema and body.type == "json_schema" else None,
                          schema.name if schema else "response")


def image_fetcher(settings: ImageSettings) -> ImageFetcher:
    """How http(s) image URLs in a request are fetched: through the browser tool's SSRF guard (no private or
    local addresses unless DEMO_BROWSER_ALLOW allows them) when DEMO_IMAGE_URLS=1, else refused."""

    def fetch(url: str) -> bytes:
        if not settings.allow_urls:
            raise ValueError("this server does not fetch http(s) image URLs: send the image inline as a data URL "
                             "(data:image/png;base64,...), or start the server with DEMO_IMAGE_URLS=1")
        try:
            return fetch_guarded(url, int(settings.max_mb * 2**20), IMAGE_FETCH_TIMEOUT_S, "image")[2]
        except ToolError as exc:
            raise ValueError(f"could not fetch the image at {url}: {exc}") from None

    return fetch


def messages(request: ChatRequest, fetch_image: ImageFetcher | None = None) -> list[ChatMessage]:
    try:
        return Conversation.from_openai(request.messages, fetch_image).to_openai()
    except ValueError as exc:
        raise APIError(400, f"Invalid messages: {exc}", param="messages") from exc
    except RecursionError as exc:  # tool-call arguments given as an object nested thousands deep (not decoded here)
        raise APIError(400, "Invalid messages: a value is nested too deeply.", param="messages") from exc
