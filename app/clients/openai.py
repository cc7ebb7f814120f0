"""OpenAI-compatible API backend (vLLM's server, our own server, llama.cpp, OpenAI...) through the official SDK.

The server applies the chat template, stop strings and the response format, and parses tool calls, so this client
sends OpenAI messages, tools and settings as they are, less the sampling fields left to the server's model defaults
(`GenerationParams.server_defaults`); the shared streaming helper (app/clients/streaming.py) does the rest, as for
every backend. Legacy text completions (`complete`) go to the server's /v1/completions, prompt and suffix as they
are. The HTTP stream is read on a helper thread so Stop works even while the server is silent; closing the stream
makes the server abort the request.

Token counts: the server's usage (the last chunk, with stream_options.include_usage) when it comes. Until then, and
for good when Stop closes the stream before it, each chunk that carries text, thought or a tool-call piece counts
as one completion token (vLLM streams one token per chunk; servers that merge tokens make this an undercount), and
the prompt size stays 0: unknown, which AnswerMetrics.summary() leaves out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import httpx
import openai
from openai.types import Completion, CompletionUsage, Model
from openai.types.chat import ChatCompletionChunk

from app.clients.client_protocol import Capabilities, ClientError, Delta, GenerationParams, ResponseFormat, ToolRequest
from app.clients.generation_defaults import generation_defaults
from app.clients.streaming import EngineFeed, EngineOutput, stream_engine
from app.config import ModelSettings
from app.domain.chat_messages import ChatMessage
from app.domain.conversation import AnswerMetrics, CallFragment
from app.domain.generation_params import SAMPLING_FIELDS
from app.prompting.chat_format import ResponseProcessor
from app.prompting.thinking import THINK_TAGS, ThinkingSplitter


def _short(text: str, limit: int = 300) -> str:
    """A server's error text as one line of at most `limit` characters: whatever a server answers (a page of
    HTML, a stack trace, the body of an internal service) is shown as a hint, not passed on whole."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _friendly(exc: BaseException, base_url: str, model: str) -> ClientError:
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
        return ClientError(f"The API at {base_url} answered HTTP {exc.status_code}: {_short(detail)}")
    return ClientError(f"The API call failed: {type(exc).__name__}: {_short(str(exc))}")


def _max_model_len(listed: list[Model], model: str) -> int | None:
    """vLLM's /models says each model's context window (max_model_len, an extra field); other servers do not."""
    for entry in listed:
        value = (entry.model_extra or {}).get("max_model_len")
        if entry.id == model and isinstance(value, int):
            return value
    return None


class OpenAIClient:
    backend = "openai"

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self.base_url = settings.api_base_url.strip().rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ClientError(f"The API base URL {self.base_url!r} must start with http:// or https://.")
        self.sdk = openai.OpenAI(
            base_url=self.base_url,
            api_key=settings.api_key or "not-needed",  # local servers take any key; the SDK insists on one
            # openai 3 types this as httpx2.Timeout and converts an httpx one (normalize_httpx_timeout).
            timeout=httpx.Timeout(600.0, connect=5.0),  # type: ignore[arg-type]
            max_retries=0,
        )
        listed = self._list_models()
        self.models = [model.id for model in listed]
        self.model = settings.api_model.strip() or (self.models[0] if self.models else "")
        if not self.model:
            raise ClientError(f"The API at {self.base_url} lists no models; enter the model name in the sidebar.")
        if self.models and self.model not in self.models:
            raise ClientError(f"The API at {self.base_url} has no model {self.model!r}. It offers: "
                              f"{', '.join(self.models)}.")
        # The server's model folder is out of sight: its name can still match a model card's recommendation.
        self.generation_defaults = generation_defaults(self.model)
        # Whether the model sees images is the server's to say (no API tells it): pictures are sent as they are.
        self.capabilities = Capabilities(model_id=self.model, native_tools=True, dialect=None,
                                         context_window=_max_model_len(listed, self.model), vision=None)
        # vLLM-style servers take top_k and repetition_penalty; OpenAI's own API rejects unknown fields.
        self._extra_sampling = "api.openai.com" not in self.base_url

    def _list_models(self) -> list[Model]:
        try:
            return list(self.sdk.models.list())
        except openai.NotFoundError:
            return []  # some servers have no /models; the user then names the model
        except Exception as exc:
            raise _friendly(exc, self.base_url, self.settings.api_model) from exc

    def describe(self) -> str:
        return f"OpenAI-compatible API · {self.model} · {self.base_url}"

    def _settings(self, params: GenerationParams) -> dict[str, Any]:
        """What a streamed request of either endpoint (chat or legacy completions) says of `params`."""
        # Sampling fields the user left at the model's defaults (params.server_defaults) are not sent: the server
        # knows the model's generation config, and our values for them are only a guess at it.
        chosen = {name: getattr(params, name) for name in SAMPLING_FIELDS if name not in params.server_defaults}
        request: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": params.max_new_tokens,
        }
        request.update({name: chosen[name] for name in ("temperature", "top_p") if name in chosen})
        if params.stop:
            request["stop"] = list(params.stop)
        if params.seed is not None:
            request["seed"] = params.seed
        if self._extra_sampling:
            # top_k 0 (no cut) is sent too: vLLM, llama.cpp's server and ours read it so, and leaving it out would
            # give the model's own top_k instead of the user's choice.
            extra: dict[str, Any] = {name: chosen[name] for name in ("top_k", "repetition_penalty") if name in chosen}
            if params.ignore_eos:
                extra["ignore_eos"] = True
            if extra:
                request["extra_body"] = extra
        return request

    def _request(self, messages: list[ChatMessage], params: GenerationParams, tools: ToolRequest | None,
                 response_format: ResponseFormat | None) -> dict[str, Any]:
        request = {**self._settings(params), "messages": messages}
        if self._extra_sampling and params.thinking is not None:  # vLLM's (and our server's) template switch
            request["extra_body"] = {**request.get("extra_body", {}),
                                     "chat_template_kwargs": {"enable_thinking": params.thinking}}
        if tools is not None and tools.tools:
            request["tools"] = list(tools.tools)
            choice = tools.choice
            request["tool_choice"] = (choice if choice in ("auto", "none", "required")
                                      else {"type": "function", "function": {"name": choice}})
            if not tools.parallel_calls:  # only when False: true is every server's default, and some lack the field
                request["parallel_tool_calls"] = False
        if response_format is not None and response_format.constrained:
            request["response_format"] = response_format.to_openai()
        return request

    def stream(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
        response_format: ResponseFormat | None = None,
    ) -> Generator[Delta, None, None]:
        started = time.perf_counter()
        request = self._request(messages, params, tools, response_format)
        # The server cuts stop strings and parses calls; the processor puts the streamed calls together. A server
        # that sends thoughts apart (reasoning_content) needs no splitting; one that leaves <think> in the text does.
        processor = ResponseProcessor(native_tools=list(tools.tools) if tools else [],
                                      thinking=ThinkingSplitter(THINK_TAGS),
                                      parallel_calls=tools.parallel_calls if tools else True)
        yield from stream_engine(_HTTPStream(self.sdk.chat.completions.create, request, _engine_output), processor,
                                 cancel, AnswerMetrics(), lambda exc: _friendly(exc, self.base_url, self.model),
                                 started)

    def complete(
        self,
        prompt: str | list[int],
        params: GenerationParams,
        cancel: threading.Event,
        suffix: str | None = None,
    ) -> Generator[Delta, None, None]:
        """The server's /v1/completions: it tokenizes, fills in the middle (or refuses to) and cuts stop strings."""
        started = time.perf_counter()
        request = {**self._settings(params), "prompt": prompt}
        if suffix is not None:
            request["suffix"] = suffix
        engine = _HTTPStream(self.sdk.completions.create, request, _completion_output)
        yield from stream_engine(engine, ResponseProcessor(), cancel, AnswerMetrics(),
                                 lambda exc: _friendly(exc, self.base_url, self.model), started)

    def activity(self) -> None:
        return None  # the server's own business (and other clients share it)

    def close(self) -> None:
        self.sdk.close()


class _HTTPStream:
    """One streamed request (`create(**request)`: a chat or a legacy completion), read on a helper thread so the
    caller can beat and stop while the server is silent; `convert` turns each chunk into an engine output. Closing
    the response drops the connection, which makes the server abort the request."""

    def __init__(self, create: Callable[..., Any], request: dict[str, Any],
                 convert: Callable[[Any], EngineOutput]) -> None:
        self.create, self.request, self.convert = create, request, convert
        self.aborted = threading.Event()
        self.response: Any = None

    def start(self, feed: EngineFeed) -> None:
        threading.Thread(target=self._read, args=(feed,), name="openai-stream", daemon=True).start()

    def abort(self) -> None:
        self.aborted.set()
        if self.response is not None:
            self.response.close()

    def _read(self, feed: EngineFeed) -> None:
        try:
            self.response = self.create(**self.request)
            if self.aborted.is_set():  # Stop came while the server was still answering the headers
                self.response.close()
                return
            for chunk in self.response:
                feed.put(self.convert(chunk))
        except Exception as exc:  # reported to the consumer, never lost in the thread
            if not self.aborted.is_set():
                feed.fail(exc)
        finally:
            feed.close()


def _engine_output(chunk: ChatCompletionChunk) -> EngineOutput:
    """One chunk as an engine output; a chunk with anything of the answer in it counts as one token (see the module
    docstring), which the server's usage replaces when it comes."""
    output = _usage_output(chunk.usage)
    for choice in chunk.choices:
        output.text += choice.delta.content or ""
        extra = choice.delta.model_extra or {}  # vLLM's servers name the thought either way, by version
        output.thinking += extra.get("reasoning_content") or extra.get("reasoning") or ""
        for call in choice.delta.tool_calls or []:
            function = call.function
            output.call_fragments.append(CallFragment(
                call.index, (function.arguments if function else None) or "", call.id or None,
                (function.name if function else None) or None))
        output.finish_reason = choice.finish_reason or output.finish_reason
    if output.text or output.thinking or output.call_fragments:
        output.tokens = 1
    return output


def _completion_output(chunk: Completion) -> EngineOutput:
    """One chunk of a streamed legacy completion as an engine output, counted as `_engine_output` counts."""
    output = _usage_output(chunk.usage)
    for choice in chunk.choices:
        output.text += choice.text
        output.finish_reason = choice.finish_reason or output.finish_reason
    if output.text:
        output.tokens = 1
    return output


def _usage_output(usage: CompletionUsage | None) -> EngineOutput:
    """An engine output with the server's token counts, where the chunk has them (the last one)."""
    output = EngineOutput()
    if usage is not None:
        output.usage = (usage.prompt_tokens or 0, usage.completion_tokens or 0)
        details = usage.prompt_tokens_details
        if details is not None and details.cached_tokens is not None:  # servers with a prompt cache say so
            output.cached_tokens = details.cached_tokens
    return output
