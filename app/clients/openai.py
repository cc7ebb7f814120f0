"""OpenAI-compatible API backend (vLLM's server, our own server, llama.cpp, OpenAI...) through the official SDK.

The server applies the chat template and parses tool calls, so this client sends OpenAI messages and tools as
they are and accumulates streamed `tool_calls` deltas by index. The HTTP stream is read on a helper thread so
the caller gets a heartbeat every 0.25 s and Stop works even while the server is silent; closing the stream
makes the server abort the request.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai

from app.clients.base import ClientError, Delta, GenerationParams, ToolRequest
from app.config import ModelSettings
from app.conversation import AnswerMetrics, ToolCall
from app.generation_defaults import generation_defaults

_HEARTBEAT_S = 0.25
_DONE = object()


def _friendly(exc: Exception, base_url: str, model: str) -> ClientError:
    """The SDK's exceptions as errors a user can act on."""
    if isinstance(exc, openai.APITimeoutError):
        return ClientError(f"The API at {base_url} did not answer in time. Is the server overloaded?")
    if isinstance(exc, openai.APIConnectionError):
        return ClientError(f"Cannot reach the API at {base_url}: is the server running and the URL right "
                           "(it usually ends in /v1)?")
    if isinstance(exc, openai.AuthenticationError):
        return ClientError(f"The API at {base_url} refused the API key (401). Check the API key in the sidebar "
                           "or DEMO_API_KEY.")
    if isinstance(exc, openai.NotFoundError):
        return ClientError(f"The API at {base_url} answered 404 for model {model!r}: check the model name and "
                           "that the URL ends in /v1.")
    if isinstance(exc, openai.APIStatusError):
        detail = exc.message if hasattr(exc, "message") else str(exc)
        return ClientError(f"The API at {base_url} answered HTTP {exc.status_code}: {detail}")
    return ClientError(f"The API call failed: {type(exc).__name__}: {exc}")


class OpenAIClient:
    backend = "openai"
    dialect_name = None  # the server parses calls
    native_tools = True

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.base_url = settings.api_base_url.strip().rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ClientError(f"The API base URL {self.base_url!r} must start with http:// or https://.")
        self.sdk = openai.OpenAI(
            base_url=self.base_url,
            api_key=settings.api_key or "not-needed",  # local servers take any key; the SDK insists on one
            timeout=httpx.Timeout(600.0, connect=5.0),
            max_retries=0,
        )
        self.models = self.list_models()
        self.model = settings.api_model.strip() or (self.models[0] if self.models else "")
        if not self.model:
            raise ClientError(f"The API at {self.base_url} lists no models; enter the model name in the sidebar.")
        if self.models and self.model not in self.models:
            raise ClientError(f"The API at {self.base_url} has no model {self.model!r}. It offers: "
                              f"{', '.join(self.models)}.")
        # The server's model folder is out of sight: its name can still match a model card's recommendation.
        self.generation_defaults = generation_defaults(self.model)
        # vLLM-style servers take top_k and repetition_penalty; OpenAI's own API rejects unknown fields.
        self._extra_sampling = "api.openai.com" not in self.base_url

    def list_models(self) -> list[str]:
        try:
            return [model.id for model in self.sdk.models.list()]
        except openai.NotFoundError:
            return []  # some servers have no /models; the user then names the model
        except Exception as exc:
            raise _friendly(exc, self.base_url, self.settings.api_model) from exc

    def describe(self) -> str:
        return f"OpenAI-compatible API · {self.model} · {self.base_url}"

    def _request(self, messages: list[dict[str, Any]], params: GenerationParams,
                 tools: ToolRequest | None) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.stop:
            request["stop"] = list(params.stop)
        if params.seed is not None:
            request["seed"] = params.seed
        if self._extra_sampling:
            extra: dict[str, Any] = {"repetition_penalty": params.repetition_penalty}
            if params.top_k > 0:
                extra["top_k"] = params.top_k
            if params.ignore_eos:
                extra["ignore_eos"] = True
            request["extra_body"] = extra
        if tools is not None and tools.tools:
            request["tools"] = list(tools.tools)
            choice = tools.choice
            request["tool_choice"] = (choice if choice in ("auto", "none", "required")
                                      else {"type": "function", "function": {"name": choice}})
        return request

    def stream(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
    ) -> Iterator[Delta]:
        metrics = AnswerMetrics()
        started = time.perf_counter()
        try:
            response = self.sdk.chat.completions.create(**self._request(messages, params, tools))
        except Exception as exc:
            raise _friendly(exc, self.base_url, self.model) from exc
        chunks: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            try:
                for chunk in response:
                    chunks.put(chunk)
            except Exception as exc:  # reported to the consumer, never lost in the thread
                chunks.put(exc)
            finally:
                chunks.put(_DONE)

        threading.Thread(target=read, name="openai-stream", daemon=True).start()
        calls: dict[int, dict[str, str]] = {}
        finish_reason: str | None = None
        first = last = None
        finished = False
        try:
            while True:
                if cancel.is_set():
                    break
                try:
                    item = chunks.get(timeout=_HEARTBEAT_S)
                except queue.Empty:
                    yield Delta(metrics=metrics)  # heartbeat: lets the UI notice Stop
                    continue
                if item is _DONE:
                    finished = True
                    break
                if isinstance(item, Exception):
                    if cancel.is_set():
                        break
                    raise _friendly(item, self.base_url, self.model) from item
                if item.usage is not None:
                    metrics.prompt_tokens = item.usage.prompt_tokens or 0
                    metrics.completion_tokens = item.usage.completion_tokens or 0
                for choice in item.choices:
                    now = time.perf_counter()
                    delta = choice.delta
                    if delta.content or delta.tool_calls:
                        first = first or now
                        last = now
                        if metrics.time_to_first_token_s is None:
                            metrics.time_to_first_token_s = now - started
                    for call in delta.tool_calls or []:
                        slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] = call.id or slot["id"]
                        if call.function is not None:
                            slot["name"] += call.function.name or ""
                            slot["arguments"] += call.function.arguments or ""
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                    if delta.content:
                        yield Delta(text=delta.content, metrics=metrics)
        finally:
            response.close()  # on Stop or a closed consumer this drops the connection: the server aborts
        metrics.record_timing(started, first, last)
        tool_calls, notice = _decode_calls(calls, tools)
        if notice:
            yield Delta(notice=notice, metrics=metrics)
        if not finished or cancel.is_set():
            metrics.finish_reason = "cancelled"
        elif tool_calls:
            metrics.finish_reason = "tool_calls"
        else:
            metrics.finish_reason = "length" if finish_reason == "length" else "stop"
        yield Delta(finish_reason=metrics.finish_reason, metrics=metrics, tool_calls=tool_calls)

    def close(self) -> None:
        self.sdk.close()


def _wrap_lone_argument(arguments: Any, name: str, tools: ToolRequest | None) -> Any:
    """vLLM 0.32's forced calls (and some small models) send a one-parameter tool's value bare ("Paris" instead of
    {"city": "Paris"}); for a tool with exactly one parameter that is unambiguous, so it is wrapped."""
    if isinstance(arguments, dict) or tools is None:
        return arguments
    for tool in tools.tools:
        properties = tool["function"].get("parameters", {}).get("properties", {})
        if tool["function"]["name"] == name and len(properties) == 1:
            return {next(iter(properties)): arguments}
    return arguments


def _decode_calls(calls: dict[int, dict[str, str]], tools: ToolRequest | None) -> tuple[list[ToolCall], str | None]:
    decoded: list[ToolCall] = []
    problems: list[str] = []
    for index in sorted(calls):
        slot = calls[index]
        try:
            arguments = json.loads(slot["arguments"] or "{}")
        except json.JSONDecodeError:
            problems.append(f"{slot['name'] or 'a tool'} (arguments are not valid JSON)")
            continue
        arguments = _wrap_lone_argument(arguments, slot["name"], tools)
        if not slot["name"] or not isinstance(arguments, dict):
            problems.append(f"{slot['name'] or 'a call without a name'} (not a function call)")
            continue
        call = ToolCall(name=slot["name"], arguments=arguments)
        if slot["id"]:
            call.id = slot["id"]
        decoded.append(call)
    notice = f"The server sent tool calls that could not be used: {', '.join(problems)}." if problems else None
    return decoded, notice
