"""The Client protocol every backend implements, and the values that cross it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.conversation import AnswerMetrics, ToolCall

if TYPE_CHECKING:
    from app.generation_defaults import GenerationDefaults


class ClientError(RuntimeError):
    """A backend failed in a way the user can act on; the message says what to do."""


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings. temperature 0 means greedy decoding; top_k 0 means no top-k cut."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 50
    repetition_penalty: float = 1.0
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False  # benchmarks only: generate exactly max_new_tokens

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.temperature <= 5.0:
            problems.append(f"temperature must be between 0 and 5 (got {self.temperature})")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            problems.append(f"top_k must be 0 (off) or positive (got {self.top_k})")
        if not 0.0 < self.repetition_penalty <= 5.0:
            problems.append(f"repetition_penalty must be in (0, 5] (got {self.repetition_penalty})")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be at least 1 (got {self.max_new_tokens})")
        if any(not s for s in self.stop):
            problems.append("stop strings must not be empty")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class ToolRequest:
    """The tools a reply may call, as in the OpenAI API.

    `choice`: "auto" (the model decides), "none" (no calls; tools left out of the prompt), "required" (at least
    one call, forced by constrained decoding where the backend can) or a tool's name (that call, forced).
    `dialect`: a tool-call dialect name overriding the one detected from the model's chat template.
    """

    tools: tuple[dict[str, Any], ...] = ()
    choice: str = "auto"
    dialect: str | None = None

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


@dataclass
class Delta:
    """One step of a streamed answer.

    `metrics` is the live metrics object of this answer (the same object on every delta, complete on the last
    one), so a consumer that stops early still knows the token counts so far.
    """

    text: str = ""
    notice: str | None = None
    finish_reason: str | None = None
    metrics: AnswerMetrics = field(default_factory=AnswerMetrics)
    tool_calls: list[ToolCall] = field(default_factory=list)  # on the last delta: the calls the reply made


class Client(Protocol):
    """A loaded backend. One instance serves every browser session of the process."""

    backend: str
    dialect_name: str | None  # the tool-call dialect detected for the model (None: the server parses calls)
    generation_defaults: GenerationDefaults  # sampling values that fit the model (app/generation_defaults.py)

    def describe(self) -> str:
        """One line for the status bar: backend, model, device."""
        ...

    def stream(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
    ) -> Iterator[Delta]:
        """Stream an answer to OpenAI-format `messages`; stop soon after `cancel` is set or the iterator closes.
        Text deltas never contain tool-call text; the calls come on the last delta (finish_reason "tool_calls")."""
        ...

    def close(self) -> None:
        """Release the model and its memory."""
        ...
