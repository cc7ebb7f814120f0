"""The Responses API's request (POST /v1/responses) and what turns it into the core's objects: its input items into
OpenAI chat messages (checked by the same `Conversation.from_openai` as chat completions), its tools and tool
choice into a ToolRequest, `text.format` into a ResponseFormat, and its settings into GenerationParams.

Tools this server's model can call are function tools, also inside a `namespace` (Codex CLI groups an MCP
server's tools so): those are flattened, each under its own name (qualified `namespace.name` only where two
namespaces share a name), and the model's calls go back with their namespace. `file_search` is run by this server
over its vector stores (file_search.py). Other hosted tools (`web_search`, `code_interpreter`, `image_generation`,
`computer_use_preview`, `mcp`...) run on OpenAI's servers, not in the client: this server does not run them, so they
are accepted (clients such as Codex CLI always send `web_search`) and not offered to the model, and forcing one with
`tool_choice` is a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from openai.types.responses.response_file_search_tool_call import Result as FileSearchResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.clients.client_protocol import GenerationParams, ResponseFormat, ToolRequest
from app.clients.generation_defaults import GenerationDefaults
from app.frontends.api.chat_completions.chat_protocol import (
    APIError,
    FunctionDefinition,
    parameters_problem,
    schema_problem,
)

# Fields accepted without effect: they change nothing for one local model, or are bookkeeping a client sends along.
_HARMLESS_FIELDS = {"service_tier", "prompt_cache_key", "prompt_cache_retention", "safety_identifier",
                    "client_metadata", "stream_options", "max_tool_calls"}
# Tools that run on OpenAI's servers; a client sends them, this server's model is not offered them.
HOSTED_TOOLS = {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                "code_interpreter", "image_generation", "computer_use_preview", "computer", "mcp",
                "local_shell", "shell", "apply_patch", "tool_search"}
_SEED_RANGE = (-(2**63), 2**63 - 1)


class TextFormat(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str = Field("response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")  # verbosity and the like: nothing a local model can act on

    format: TextFormat | None = None


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(BaseModel):
    """POST /v1/responses. Beyond OpenAI's fields, `top_k`, `repetition_penalty` and `seed` as vLLM's server takes
    them."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[Any] = Field(default_factory=list)  # each item checked by chat_messages
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0.0, le=5.0)
    seed: int | None = Field(None, ge=_SEED_RANGE[0], le=_SEED_RANGE[1])
    metadata: dict[str, str] | None = None
    user: str | None = Field(None, max_length=512)
    store: bool = True  # as OpenAI's API: stored unless the client says not to
    stream: bool = False
    include: list[str] | None = None
    background: bool | None = None
    top_logprobs: int | None = None
    # "disabled": an input over the context window is a 400, as OpenAI answers; "auto" (and, as before, left out):
    # the oldest messages are dropped to fit.
    truncation: Literal["auto", "disabled"] | None = None


def check_supported(request: ResponsesRequest) -> None:
    """Say no, clearly, to what this server does not do."""
    if request.background:
        raise APIError(400, "background responses are not supported: send the request and wait, or stream it.",
                       param="background")
    if request.top_logprobs:
        raise APIError(400, "logprobs are not supported by this server.", param="top_logprobs")
    unknown = sorted(set(request.model_extra or {}) - _HARMLESS_FIELDS)
    if unknown:
        raise APIError(400, f"Unsupported field(s): {', '.join(unknown)}.", param=unknown[0])
    if request.metadata is not None and (len(request.metadata) > 16 or any(
            len(key) > 64 or len(value) > 512 for key, value in request.metadata.items())):
        raise APIError(400, "metadata holds at most 16 pairs, keys up to 64 and values up to 512 characters.",
                       param="metadata")


def input_items(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    if isinstance(request.input, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": request.input}]}]
    return request.input


def generation_params(request: ResponsesRequest, defaults: GenerationDefaults,
                      default_max_tokens: int) -> GenerationParams:
    """The request's sampling settings; those it leaves out come from the model's defaults. A reasoning effort of
    "none" turns a switchable model's thought off; any other effort leaves it as the model has it."""
    effort = request.reasoning.effort if request.reasoning else None
    try:
        params = defaults.params(temperature=request.temperature, top_p=request.top_p, top_k=request.top_k,
                                 repetition_penalty=request.repetition_penalty,
                                 max_new_tokens=request.max_output_tokens or default_max_tokens, stop=(),
                                 seed=request.seed, thinking=False if effort == "none" else None)
        return replace(params, truncate=False) if request.truncation == "disabled" else params
    except ValueError as exc:
        raise APIError(400, str(exc)) from exc


def response_format(request: ResponsesRequest) -> ResponseFormat | None:
    """`text.format` as the core's ResponseFormat: json_schema through the same grammar as chat completions'
    response_format."""
    chosen = request.text.format if request.text else None
    if chosen is None or chosen.type == "text":
        return None
    if chosen.type == "json_object":
        return ResponseFormat("json_object", None, chosen.name)
    if chosen.json_schema is None:
        raise APIError(400, 'text.format type json_schema needs "schema": {...} (and a "name").',
                       param="text.format.schema")
    problem = schema_problem(chosen.json_schema)
    if problem:
        raise APIError(400, f"text.format.schema: {problem}", param="text.format.schema")
    return ResponseFormat("json_schema", chosen.json_schema, chosen.name)


@dataclass
class Tools:
    """The request's tools as the core sees them, and how to name the model's calls back."""

    request: ToolRequest | None
    namespaces: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # offered name: (namespace, name)

    def origin(self, offered_name: str) -> tuple[str | None, str]:
        """The namespace (None: a top-level tool) and name of the tool the model called by `offered_name`."""
        return self.namespaces.get(offered_name, (None, offered_name))


def tools(request: ResponsesRequest) -> Tools:
    """Function tools, namespaces flattened, hosted tools left out; the tool choice and whether calls may come in
    parallel. 422 for parameters that are not a JSON Schema, 400 for a choice that cannot be honoured."""
    functions: list[tuple[str | None, dict[str, Any], str]] = []  # (namespace, tool, where)
    for index, tool in enumerate(request.tools or ()):
        where = f"tools.{index}"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            functions.append((None, tool, where))
        elif kind == "namespace":
            inner = tool.get("tools")
            if not isinstance(inner, list) or not isinstance(tool.get("name"), str):
                raise APIError(400, f'{where}: a namespace tool needs "name" and a list of "tools".', param=where)
            for position, member in enumerate(inner):
                if not isinstance(member, dict) or member.get("type", "function") != "function":
                    raise APIError(400, f"{where}.tools.{position}: only function tools can be in a namespace here.",
                                   param=f"{where}.tools.{position}")
                functions.append((tool["name"], member, f"{where}.tools.{position}"))
        elif kind != "file_search" and kind not in HOSTED_TOOLS:  # file_search: see file_search.py
            raise APIError(400, f"{where}: tool type {kind!r} is not supported; this server offers function tools "
                                f"(hosted tools such as web_search are accepted and not offered to the model).",
                           param=where)
    offered, namespaces = _offered(functions)
    searched = any(isinstance(tool, dict) and tool.get("type") == "file_search" for tool in request.tools or ())
    choice = _choice(request.tool_choice, set(offered), namespaces)
    if (searched and choice == "required") or choice == "file_search":
        choice = "auto"  # the server searches before the answer: what is required is done, functions stay optional
    if not offered:
        if choice not in ("none", "auto"):
            raise APIError(400, "tool_choice needs function tools.", param="tool_choice")
        return Tools(None)
    try:
        tool_request = ToolRequest(tools=tuple(offered.values()), choice=choice,
                                   parallel_calls=request.parallel_tool_calls is not False)
    except ValueError as exc:
        raise APIError(400, str(exc), param="tool_choice") from exc
    return Tools(tool_request, namespaces)


def _offered(functions: list[tuple[str | None, dict[str, Any], str]]
             ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str | None, str]]]:
    """Each function as a chat tool, by the name the model sees: its own, or `namespace.name` where two share it."""
    counts: dict[str, int] = {}
    for _, tool, _ in functions:
        counts[str(tool.get("name"))] = counts.get(str(tool.get("name")), 0) + 1
    offered: dict[str, dict[str, Any]] = {}
    namespaces: dict[str, tuple[str | None, str]] = {}
    for namespace, tool, where in functions:
        name = str(tool.get("name"))
        seen_as = f"{namespace}.{name}" if namespace and counts[name] > 1 else name
        try:
            definition = FunctionDefinition(name=seen_as, description=tool.get("description"),
                                            parameters=tool.get("parameters") or {"type": "object", "properties": {}},
                                            strict=tool.get("strict"))
        except ValueError as exc:
            raise APIError(400, f"{where}: {_first_error(exc)}", param=where) from exc
        problem = parameters_problem(definition.parameters)
        if problem:
            raise APIError(422, f"{where}.parameters: {problem}", param=f"{where}.parameters")
        if seen_as in offered:
            raise APIError(400, f"{where}: two tools are named {seen_as!r}.", param=where)
        offered[seen_as] = {"type": "function", "function": definition.model_dump(exclude_none=True)}
        namespaces[seen_as] = (namespace, name)
    return offered, namespaces


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        return f"{'.'.join(str(part) for part in first.get('loc', ()))}: {first.get('msg', 'invalid')}"
    return str(exc)


def _choice(choice: str | dict[str, Any] | None, offered: set[str],
            namespaces: dict[str, tuple[str | None, str]]) -> str:
    """"auto", "none", "required", "file_search" or the name (as offered) of the one function to call."""
    if isinstance(choice, dict) and choice.get("type") == "file_search":
        return "file_search"  # file_search.py checks that the tool is there
    if choice is None or choice in ("auto", "none", "required"):
        return choice or "auto"
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        name = choice["name"]
        wanted = (choice.get("namespace"), name) if choice.get("namespace") else None
        for seen_as, origin in namespaces.items():
            if (wanted and origin == wanted) or (not wanted and seen_as == name):
                return seen_as
        raise APIError(400, f"tool_choice names {name!r}, which is not among the function tools.",
                       param="tool_choice")
    if isinstance(choice, dict) and choice.get("type") in HOSTED_TOOLS:
        raise APIError(400, f"tool_choice {choice.get('type')!r}: this server runs no hosted tools.",
                       param="tool_choice")
    raise APIError(400, 'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}.',
                   param="tool_choice")


# ----- input items → chat messages -------------------------------------------------------------------------------

def chat_messages(instructions: str | None, items: list[dict[str, Any]],
                  tools: Tools) -> list[dict[str, Any]]:
    """Instructions and input items (the previous responses' items first, where the request continues one) as
    OpenAI chat messages: messages by role (developer as system), function calls as an assistant message's
    tool_calls, their outputs as tool messages, a reasoning item as the next assistant message's thought."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    thought: list[str] = []  # a reasoning item waiting for the assistant message it belongs to
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise APIError(400, f"input.{index}: an input item must be a JSON object.", param=f"input.{index}")
        kind = item.get("type", "message")
        where = f"input.{index}"
        if kind == "message":
            message = _message(item, where)
            if message["role"] == "assistant":
                target = _assistant(messages, thought)
                target["content"] = _join(target["content"], message["content"])
            else:
                messages.append(message)
        elif kind == "function_call":
            call = _function_call(item, where, tools)
            _assistant(messages, thought).setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": _text_field(item, "call_id", where),
                             "content": _output_text(item.get("output"), where)})
        elif kind == "reasoning":
            thought.append(_reasoning_text(item))
        elif kind == "file_search_call":
            continue  # an earlier search: its passages were read for the question they were found for
        elif kind == "item_reference":
            raise APIError(400, f"{where}: item references are not supported; continue a stored response with "
                                "previous_response_id, or send the items themselves.", param=where)
        else:
            raise APIError(400, f"{where}: input item type {kind!r} is not supported here (messages, function_call, "
                                "function_call_output, reasoning and file_search_call are).", param=where)
    return messages


def _assistant(messages: list[dict[str, Any]], thought: list[str]) -> dict[str, Any]:
    """The assistant message the next assistant item belongs to: the last one, unless a user, system or tool
    message came after it (a new one then), taking any waiting thought."""
    if not messages or messages[-1]["role"] != "assistant" or (thought and messages[-1].get("reasoning_content")):
        messages.append({"role": "assistant", "content": ""})
    if thought:
        text = "\n".join(part for part in thought if part)
        if text:
            messages[-1]["reasoning_content"] = text
        thought.clear()
    return messages[-1]


def _join(first: Any, second: Any) -> Any:
    if not first:
        return second
    if isinstance(first, str) and isinstance(second, str):
        return first + second
    return [*_parts(first), *_parts(second)]


def _parts(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise APIError(400, f"{where}.role: must be user, system, developer or assistant (not {role!r}).",
                       param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": "system" if role == "developer" else role, "content": content}
    if not isinstance(content, list):
        raise APIError(400, f"{where}.content: must be a string or a list of content parts.",
                       param=f"{where}.content")
    parts: list[dict[str, Any]] = []
    for position, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}.content.{position}"
        if kind in ("input_text", "output_text", "text", "summary_text", "refusal") and isinstance(
                part.get("text", part.get("refusal")), str):
            parts.append({"type": "text", "text": part.get("text", part.get("refusal"))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise APIError(400, f"{at}: an input_image needs an image_url (a data: URL); file ids are not "
                                    "supported here.", param=at)
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_file":
            raise APIError(400, f"{at}: input_file is not supported here; send the document's text as input_text.",
                           param=at)
        else:
            raise APIError(400, f"{at}: content part type {kind!r} is not supported (input_text, output_text and "
                                "input_image are).", param=at)
    if all(part["type"] == "text" for part in parts):  # separate text parts stay separate paragraphs
        return {"role": "system" if role == "developer" else role,
                "content": "\n\n".join(part["text"] for part in parts)}
    return {"role": "system" if role == "developer" else role, "content": parts}


def _function_call(item: dict[str, Any], where: str, tools: Tools) -> dict[str, Any]:
    name = _text_field(item, "name", where)
    namespace = item.get("namespace")
    offered = next((seen_as for seen_as, origin in tools.namespaces.items() if origin == (namespace, name)), name)
    arguments = item.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": _text_field(item, "call_id", where), "type": "function",
            "function": {"name": offered, "arguments": arguments}}


def _text_field(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise APIError(400, f"{where}.{key}: must be a non-empty string.", param=f"{where}.{key}")
    return value


def _output_text(output: Any, where: str) -> str:
    """A function call's output: a string, or a list of content parts of which the text is kept."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        texts = [part.get("text") for part in output if isinstance(part, dict) and part.get("type") in (
            "input_text", "output_text", "text")]
        return "\n\n".join(text for text in texts if isinstance(text, str))
    raise APIError(400, f"{where}.output: must be a string or a list of content parts.", param=f"{where}.output")


def _reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's thought: its text, else its summary (an encrypted one is another server's, not ours)."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list):
            texts = [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]
            if texts:
                return "\n".join(texts)
    return ""


# ----- input items as stored ------------------------------------------------------------------------------------

_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text"}
_CALL_STATUSES = {"in_progress", "searching", "completed", "incomplete", "failed"}


def stored_item(item: dict[str, Any]) -> dict[str, Any]:
    """An input item (one `chat_messages` took) as it is stored and listed: only the fields OpenAI's schema gives
    its type and this server reads, in their schema's shape; whatever else the client put in is dropped. (Stored
    items come back as the input of follow-ups, through `chat_messages` again.)"""
    kind = item.get("type", "message")
    kept: dict[str, Any] = {"type": kind}
    if isinstance(item.get("id"), str) and 0 < len(item["id"]) <= 100:
        kept["id"] = item["id"]
    if kind == "message":
        kept["role"] = item["role"]
        content = item["content"]
        kept["content"] = content if isinstance(content, str) else [_stored_part(part) for part in content]
    elif kind == "function_call":
        arguments = item.get("arguments", "{}")
        kept.update(call_id=item["call_id"], name=item["name"],
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments))
        if isinstance(item.get("namespace"), str):
            kept["namespace"] = item["namespace"]
    elif kind == "function_call_output":
        output = item["output"]  # a string or a list: chat_messages checked it
        kept.update(call_id=item["call_id"], output=output if isinstance(output, str) else [
            {"type": "input_text", "text": part["text"]} for part in output
            if isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str)])
    elif kind == "file_search_call":
        queries = item.get("queries")
        status = item.get("status")
        kept.update(queries=[query for query in queries if isinstance(query, str)] if isinstance(queries, list)
                    else [], status=status if isinstance(status, str) and status in _CALL_STATUSES else "completed")
        results = item.get("results")
        if isinstance(results, list):
            kept["results"] = [_stored_result(result) for result in results if _stored_result(result) is not None]
    elif kind == "reasoning":
        for key, part_type in (("summary", "summary_text"), ("content", "reasoning_text")):
            parts = item.get(key)
            kept[key] = [{"type": part_type, "text": part["text"]} for part in parts
                         if isinstance(part, dict) and isinstance(part.get("text"), str)] \
                if isinstance(parts, list) else []
    return kept


def _stored_result(result: Any) -> dict[str, Any] | None:
    """A file_search_call's result as its schema has it (None: not one)."""
    try:
        checked = FileSearchResult.model_validate(result)
    except ValidationError:
        return None
    return checked.model_dump(exclude_none=True, include=set(FileSearchResult.model_fields))


def _stored_part(part: dict[str, Any]) -> dict[str, Any]:
    """A message's content part as stored: its type and its text (or image URL and detail), nothing else."""
    kind = part["type"]
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind == "input_image":
        detail = part.get("detail")
        return {"type": "input_image", "image_url": part["image_url"],
                "detail": detail if detail in ("low", "high", "auto") else "auto"}
    return {"type": kind, "text": part.get("text", part.get("refusal"))}
