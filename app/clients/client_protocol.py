"""The Client protocol every backend implements, and the values that cross it."""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from app.clients.generation_defaults import GenerationDefaults
from app.domain.chat_messages import ChatMessage
from app.domain.conversation import AnswerMetrics, CallFragment, ToolCall
from app.domain.generation_params import GenerationParams  # defined below generation_defaults; used from here too


class ClientError(RuntimeError):
    """A backend failed in a way the user can act on; the message says what to do."""

    @classmethod
    def engine_failed(cls, engine: str, error: BaseException) -> ClientError:
        """`engine` failed with `error`: its message, or its type where it has none (an empty AssertionError once
        surfaced as "Generation failed: "), never an empty sentence."""
        detail = str(error).strip() or f"{type(error).__name__} (no message; the log has the details)"
        return cls(f"{engine} failed: {detail}")


@dataclass(frozen=True)
class ToolRequest:
    """The tools a reply may call, as in the OpenAI API.

    `choice`: "auto" (the model decides), "none" (no calls; tools left out of the prompt), "required" (at least
    one call, forced by constrained decoding where the backend can) or a tool's name (that call, forced).
    `dialect`: a tool-call dialect name overriding the one detected from the model's chat template.
    `parallel_calls`: False (OpenAI's `parallel_tool_calls: false`) allows at most one call per reply: the reply
    ends as soon as its first call is complete. (A local backend's forced call is one call either way: its grammar
    allows exactly one.)
    """

    tools: tuple[dict[str, Any], ...] = ()
    choice: str = "auto"
    dialect: str | None = None
    parallel_calls: bool = True

    def __post_init__(self) -> None:
        names = self.names
        if self.choice not in ("auto", "none", "required") and self.choice not in names:
            raise ValueError(f"tool_choice {self.choice!r} is neither auto, none, required nor one of the tools "
                             f"({', '.join(names) or 'no tools given'})")
        if self.choice == "required" and not names:
            raise ValueError("tool_choice 'required' needs at least one tool")

    @property
    def names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools]

    @property
    def active_tools(self) -> list[dict[str, Any]]:
        """The tools to show the model: none for "none", only the callable one(s) when a call is forced. (A long
        list of tools it cannot call now only costs prefill time and distracts small models: SmolLM2 copied a URL
        exactly with one tool in its prompt and garbled it with six.)"""
        if self.choice == "none":
            return []
        return self.forced_tools or list(self.tools)

    @property
    def forced_tools(self) -> list[dict[str, Any]]:
        """The tools one of which must be called: all for "required", one for a named choice, none otherwise."""
        if self.choice == "required":
            return list(self.tools)
        return [tool for tool in self.tools if tool["function"]["name"] == self.choice]


@dataclass(frozen=True)
class ResponseFormat:
    """The shape the text of a reply must have, as OpenAI's `response_format`: "text" (free), "json_object" (any
    JSON object) or "json_schema" (JSON valid against `schema`). Local backends enforce it with a grammar."""

    type: str = "text"
    schema: dict[str, Any] | None = None
    name: str = "response"  # json_schema: the schema's name, which OpenAI's API requires

    def __post_init__(self) -> None:
        if self.type not in ("text", "json_object", "json_schema"):
            raise ValueError(f"response_format type {self.type!r} is not one of text, json_object, json_schema")
        if self.type == "json_schema" and not isinstance(self.schema, dict):
            raise ValueError("response_format json_schema needs json_schema.schema, a JSON Schema object")

    @property
    def constrained(self) -> bool:
        return self.type != "text"

    def to_openai(self) -> dict[str, Any]:
        if self.type == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": self.name, "schema": self.schema, "strict": True}}
        return {"type": self.type}


@dataclass(frozen=True)
class Capabilities:
    """What a loaded backend can do and is; front ends read these instead of probing the client."""

    model_id: str  # the model's name, as an API server offers it
    native_tools: bool  # the model sees tools through its own chat template (or the remote server's)
    dialect: str | None  # the tool-call dialect this client parses; None: a remote server parses calls
    context_window: int | None  # prompt + answer tokens; None when the backend does not say
    vision: bool | None = False  # sees images in user messages; None: unknown (a remote server decides)
    max_images: int | None = None  # the most images one prompt may show it; None: no limit of ours
    thinking: bool = False  # a reasoning model: its replies may open with a thought (<think>...</think>)
    thinking_switch: bool = False  # its template turns the thought on and off (GenerationParams.thinking)
    structured_output: bool = True  # honours ResponseFormat (and forced tool calls) with constrained decoding


@dataclass(frozen=True)
class ModelActivity:
    """What a loaded local model is doing for all sessions at this moment."""

    generating: int  # answers being written now (together, where the backend batches them)
    waiting: int  # answers that wait for room
    at_once: int  # the most it writes together (1: one after another)

    def describe(self) -> str:
        together = f"up to {self.at_once} answers together" if self.at_once > 1 else "one answer at a time"
        if not self.generating and not self.waiting:
            return f"The model is idle (it writes {together})."
        text = f"The model is writing {self.generating} answer{'s' if self.generating != 1 else ''}"
        text += " at once" if self.generating > 1 else ""
        if self.waiting:
            text += f"; {self.waiting} more waiting"
        return f"{text} ({together})."


@dataclass
class Delta:
    """One step of a streamed answer.

    A delta with no text, notice, call fragments or finish reason is a heartbeat: the backend is busy (prefill,
    queued, a silent server) and the consumer gets a chance to notice Stop. Clients send one at least every
    `app.clients.streaming.HEARTBEAT_S` while nothing else comes.

    `metrics` is the live metrics object of this answer (the same object on every delta, complete on the last
    one), so a consumer that stops early still knows the token counts so far. `call_fragments` stream the tool
    calls as they are written (name first, then argument text); the last delta carries them whole in `tool_calls`.
    """

    text: str = ""
    notice: str | None = None
    finish_reason: str | None = None
    thinking: str = ""  # a reasoning model's thought (never part of `text`)
    metrics: AnswerMetrics = field(default_factory=AnswerMetrics)
    call_fragments: list[CallFragment] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)  # on the last delta: the calls the reply made

    @property
    def is_heartbeat(self) -> bool:
        return not (self.text or self.notice or self.call_fragments or self.finish_reason or self.thinking)


class Client(Protocol):
    """A loaded backend. One instance serves every browser session (and API request) of the process."""

    backend: str
    capabilities: Capabilities
    generation_defaults: GenerationDefaults  # sampling values that fit the model (app/clients/generation_defaults.py)

    def describe(self) -> str:
        """One line for the status bar: backend, model, device."""
        ...

    def stream(
        self,
        messages: list[ChatMessage],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
        response_format: ResponseFormat | None = None,
    ) -> Generator[Delta, None, None]:
        """Stream an answer to OpenAI-format `messages`; stop soon after `cancel` is set or the iterator closes.

        Text deltas never contain tool-call text. The last delta has the finish reason: "stop", "length" (cut at
        the token limit: a forced call cut so comes as fragments only), "tool_calls" (with the calls) or
        "cancelled". Raises ClientError, with what to do, for a request the backend cannot serve."""
        ...

    def complete(
        self,
        prompt: str | list[int],
        params: GenerationParams,
        cancel: threading.Event,
        suffix: str | None = None,
    ) -> Generator[Delta, None, None]:
        """Stream a raw continuation of `prompt` (text, or token ids of this model's vocabulary), as legacy text
        completions do: no chat template, no tool calls, no thought split off. With `suffix`, fill in the middle
        between `prompt` and `suffix` (prefix-suffix-middle, with the model's FIM tokens). Stop strings, Stop
        (`cancel`), metrics and the finish reason ("stop", "length" or "cancelled") as in `stream`. Raises
        ClientError for a prompt the model cannot take: too long for its context, or a suffix for a model without
        FIM tokens."""
        ...

    def activity(self) -> ModelActivity | None:
        """How many answers (of every session) the model is writing and how many wait; None where the backend does
        not know (a remote server)."""
        ...

    def close(self) -> None:
        """Release the model and its memory."""
        ...


@runtime_checkable
class PromptWarming(Protocol):
    """A client whose engine keeps a prompt cache it can fill ahead of a request (llama.cpp's runner)."""

    def warm(self, messages: list[ChatMessage], params: GenerationParams, tools: ToolRequest | None) -> None:
        """Read, in the background and only while nothing else waits, the beginning every turn starting with
        `messages` shares (the system prompt and the tools' schemas), so that such a turn reads only what follows."""
        ...
