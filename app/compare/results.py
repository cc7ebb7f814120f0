"""What one target's turn came to, read off the agent's events (app/agent/loop.py) as they pass: the answer, the
figures (TTFT, tok/s, tokens, prompt and cached tokens) and, for each tool call, whether it parsed, matched its
tool's schema and how its run went."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from app.agent.loop import (
    AnswerDone,
    ApprovalNeeded,
    QuestionAsked,
    ToolCallFinished,
    ToolCallWriting,
    TurnDone,
    TurnError,
    TurnEvent,
)
from app.domain.conversation import AnswerMetrics, ToolCall
from app.tools.tool_registry import ToolRegistry

# How a call's run went: a tool message's status, "waiting" (for the user's approval, or its answer to a question)
# or None (it never ran: it did not parse, or the turn ended first).
CallStatus = Literal["ok", "failed", "stopped", "denied", "waiting"]


@dataclass
class CallCheck:
    """One tool call an answer made, or tried to make."""

    name: str
    arguments: dict[str, Any] | None  # None when it did not parse
    arguments_text: str = ""  # as written (streamed), for a call that did not parse
    parsed: bool = True  # the reply's call came back whole (valid JSON, a function call)
    schema_error: str | None = None  # the registry's validation_error (unknown tool, arguments off the schema)
    status: CallStatus | None = None
    result: str = ""  # the tool's result text
    duration_s: float | None = None
    id: str = ""
    round: int = 0  # which generation of the turn made it (0: the first)

    @property
    def schema_valid(self) -> bool | None:
        """Whether the arguments match the tool's schema (a known tool's); None for a call that did not parse."""
        return self.schema_error is None if self.parsed else None

    @property
    def valid(self) -> bool:
        """Parsed and matching its tool's schema."""
        return self.parsed and self.schema_error is None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "arguments_text": self.arguments_text,
                "parsed": self.parsed, "schema_valid": self.schema_valid,
                "schema_error": self.schema_error, "status": self.status, "result": self.result,
                "duration_s": self.duration_s, "round": self.round}


@dataclass(frozen=True)
class TurnMetrics:
    """A turn's figures over all its generations (one per tool round): time to the first token of the first,
    tokens summed, and the decoding speed over all of them (tokens after the first of each, per second of
    decoding)."""

    time_to_first_token_s: float | None = None
    tokens_per_second: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generations: int = 0
    total_time_s: float = 0.0  # the whole turn, tools included

    @classmethod
    def of(cls, generations: list[AnswerMetrics], total_time_s: float) -> TurnMetrics:
        decoded = [m for m in generations if m.tokens_per_second and m.completion_tokens > 1]
        seconds = sum((m.completion_tokens - 1) / (m.tokens_per_second or 1) for m in decoded)
        speed = sum(m.completion_tokens - 1 for m in decoded) / seconds if seconds > 0 else None
        return cls(
            time_to_first_token_s=generations[0].time_to_first_token_s if generations else None,
            tokens_per_second=speed,
            completion_tokens=sum(m.completion_tokens for m in generations),
            prompt_tokens=sum(m.prompt_tokens for m in generations),
            cached_tokens=sum(m.cached_tokens for m in generations),
            generations=len(generations),
            total_time_s=total_time_s,
        )

    def to_json(self) -> dict[str, Any]:
        return {"ttft_s": self.time_to_first_token_s, "tokens_per_second": self.tokens_per_second,
                "completion_tokens": self.completion_tokens, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "generations": self.generations,
                "total_time_s": self.total_time_s}


@dataclass
class TargetResult:
    """One target's turn, filled in by `observe` as its events pass (by the thread that runs it)."""

    label: str
    answer: str = ""  # the last answer's text
    thinking: str = ""
    error: str | None = None
    finish_reason: str | None = None  # the last generation's: stop, length, tool_calls, cancelled, error
    generations: list[AnswerMetrics] = field(default_factory=list)
    calls: list[CallCheck] = field(default_factory=list)
    done: bool = False
    started: float = field(default_factory=time.perf_counter)
    total_time_s: float = 0.0

    @property
    def stopped(self) -> bool:
        return self.finish_reason == "cancelled"

    @property
    def metrics(self) -> TurnMetrics:
        return TurnMetrics.of(self.generations, self.total_time_s)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "answer": self.answer, "thinking": self.thinking, "error": self.error,
                "finish_reason": self.finish_reason, "stopped": self.stopped, "metrics": self.metrics.to_json(),
                "tool_calls": [call.to_json() for call in self.calls]}


class ResultCollector:
    """Reads one turn's events into a TargetResult. `registry`: the tools the model was offered, which judge its
    calls (a call to any other tool is an unknown tool)."""

    def __init__(self, label: str, registry: ToolRegistry | None = None) -> None:
        self.result = TargetResult(label)
        self._registry = registry if registry is not None else ToolRegistry()
        self._writing: dict[int, tuple[str, str]] = {}  # the calls being written in this generation, by index
        self._by_id: dict[str, CallCheck] = {}

    def observe(self, event: TurnEvent) -> None:
        result = self.result
        match event:
            case ToolCallWriting(index=index, name=name, arguments=arguments):
                self._writing[index] = (name, arguments)
            case AnswerDone(message=message):
                self._answered(message.tool_calls, message.metrics)
                result.answer, result.thinking = message.content, message.thinking
                result.error = message.error or result.error
            case ToolCallFinished(call=call, message=message):
                check = self._by_id.get(call.id)
                if check is not None:
                    check.status = message.tool_status
                    check.result = message.display_text or message.content
                    check.duration_s = message.duration_s
            case ApprovalNeeded(calls=calls):
                for call in calls:
                    self._set_status(call, "waiting")
            case QuestionAsked(call=call):
                self._set_status(call, "waiting")
            case TurnError(message=text):
                result.error = text
            case TurnDone(message=message):
                result.answer = message.content or result.answer
            case _:
                pass

    def error(self, text: str) -> None:
        """The turn failed outside the agent (the model did not load, a bug): say so."""
        self.result.error = text
        self.result.finish_reason = "error"

    def carry_on(self) -> None:
        """The turn goes on (its waiting calls were decided): more events follow, the figures add up."""
        self.result.done = False
        self._writing = {}

    def finish(self) -> TargetResult:
        result = self.result
        result.total_time_s = time.perf_counter() - result.started
        result.done = True
        return result

    def _answered(self, calls: list[ToolCall], metrics: AnswerMetrics | None) -> None:
        result = self.result
        round_index = len(result.generations)
        if metrics is not None:
            result.generations.append(metrics)
            result.finish_reason = metrics.finish_reason
        written = dict(sorted(self._writing.items()))
        self._writing = {}
        for call in calls:
            # The written call it came from: the first one of its name not matched yet (calls stream in order).
            index = next((i for i, (name, _) in written.items() if name == call.name), None)
            if index is not None:
                del written[index]
            check = CallCheck(call.name, call.arguments, parsed=True, id=call.id, round=round_index,
                              schema_error=self._registry.validation_error(call.name, call.arguments))
            result.calls.append(check)
            self._by_id[call.id] = check
        for name, arguments in written.values():  # written, but no call came of it
            result.calls.append(CallCheck(name, None, arguments_text=arguments, parsed=False, round=round_index))

    def _set_status(self, call: ToolCall, status: CallStatus) -> None:
        check = self._by_id.get(call.id)
        if check is not None:
            check.status = status
