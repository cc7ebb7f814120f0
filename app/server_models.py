"""The API server's request model and what turns it into the core's objects (sampling settings, tools, response
format, messages), with OpenAI's error shape for everything it refuses. Responses are `openai.types.chat` models
(app/server_responses.py)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from openai.types import Model
from pydantic import BaseModel, ConfigDict, Field

from app.clients.base import GenerationParams, ResponseFormat, ToolRequest
from app.conversation import Conversation
from app.generation_defaults import GenerationDefaults

# Fields the API accepts without acting on them (they change nothing for a single local model).
_HARMLESS_FIELDS = {"user", "metadata", "store", "parallel_tool_calls", "service_tier"}


class APIError(Exception):
    """A request the server refuses, answered in OpenAI's error shape (which the SDKs turn into typed errors)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.kind, self.param, self.code)


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


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
    response_format: ResponseFormatBody | None = None
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
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1)
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: bool = False


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
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from exc


def tool_request(request: ChatRequest) -> ToolRequest | None:
    choice = request.tool_choice
    name = choice.function.name if isinstance(choice, NamedToolChoice) else (choice or "auto")
    if not request.tools:
        if name not in ("none", "auto"):
            raise APIError(400, "tool_choice needs tools.", param="tool_choice")
        return None
    try:
        return ToolRequest(tools=tuple(tool.model_dump(exclude_none=True) for tool in request.tools), choice=name)
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
    return ResponseFormat(body.type, schema.json_schema if schema and body.type == "json_schema" else None,
                          schema.name if schema else "response")


def messages(request: ChatRequest) -> list[dict[str, Any]]:
    try:
        return Conversation.from_openai(request.messages).to_openai()
    except ValueError as exc:
        raise APIError(400, f"Invalid messages: {exc}", param="messages") from exc
