"""A scripted stand-in for a model, for tests of the logic around one (the agent's tool loop above all).

`ScriptedClient` speaks the real `Client` protocol (app/clients/client_protocol.py): backend, capabilities, generation
defaults, describe(), stream(), complete(), activity(), close(). Each call of `stream` or `complete` plays the next
scripted reply, a list of `Delta`s, and records what the client was asked (messages, params, tools, response format; a
raw completion's prompt and suffix) in `requests`:

    client = ScriptedClient([call_reply(ToolCall("calculator", {"expression": "6 * 7"})), text_reply("42.")])
    events = list(run_turn(client, conversation, params, tools=...))
    assert client.requests[1].messages[-1]["role"] == "tool"

It keeps the promises a real client keeps, so a test cannot pass on behaviour no backend has: one live
`AnswerMetrics` per reply, shared by all its deltas and complete on the last one; the last delta carries the finish
reason (the fake adds a "stop" one when a script leaves it out); Stop (`cancel`) ends the reply with "cancelled"; a
consumer that closes the stream early leaves metrics saying "cancelled"; no tool call comes back to a request that
offered no tools, and no thought to a raw completion. An exception in a script is raised where it stands (a reply
that is an exception fails at once). No torch, no model: a scripted turn takes milliseconds.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.clients.client_protocol import (
    Capabilities,
    Delta,
    GenerationParams,
    ModelActivity,
    ResponseFormat,
    ToolRequest,
)
from app.clients.generation_defaults import GenerationDefaults
from app.domain.conversation import AnswerMetrics, CallFragment, ToolCall

Reply = list[Delta | BaseException] | BaseException  # the deltas of one answer, maybe an error among or instead of them
FINISH_REASONS = ("stop", "length", "tool_calls", "cancelled")


# ----- writing scripts --------------------------------------------------------------------------------------------

def text_reply(*pieces: str, finish: str = "stop") -> list[Delta]:
    """An answer streamed as these pieces of text, then its finish reason."""
    return [*(Delta(text=piece) for piece in pieces), Delta(finish_reason=finish)]


def thinking(*pieces: str) -> list[Delta]:
    """A reasoning model's thought, streamed apart from the answer; put it before a `text_reply` or `call_reply`."""
    return [Delta(thinking=piece) for piece in pieces]


def call_reply(*calls: ToolCall, text: str = "") -> list[Delta]:
    """A reply that calls tools, as clients stream one: maybe some text first, then each call's name, then its
    arguments (call fragments), then the finish reason "tool_calls" with the calls whole."""
    deltas = [Delta(text=text)] if text else []
    for index, call in enumerate(calls):
        deltas += [Delta(call_fragments=[fragment]) for fragment in CallFragment.whole(index, call)]
    return [*deltas, Delta(finish_reason="tool_calls", tool_calls=list(calls))]


# ----- what the client was asked ----------------------------------------------------------------------------------

@dataclass
class Request:
    """One call of `stream` or `complete`: what the client received (a copy, as it was then) and how the reply went.
    A raw completion has no messages, its `prompt` (and `suffix`) instead."""

    messages: list[dict[str, Any]]
    params: GenerationParams
    tools: ToolRequest | None
    response_format: ResponseFormat | None
    cancel: threading.Event
    metrics: AnswerMetrics = field(default_factory=AnswerMetrics)  # the reply's live metrics
    delivered: list[Delta] = field(default_factory=list)  # the deltas the consumer took, in order
    closed_early: bool = False  # the consumer closed the stream before its last delta
    prompt: str | list[int] | None = None  # complete(): the raw prompt; None for stream()
    suffix: str | None = None  # complete(): the text after the gap to fill in

    @property
    def roles(self) -> list[str]:
        return [message["role"] for message in self.messages]

    @property
    def tool_choice(self) -> str | None:
        return self.tools.choice if self.tools is not None else None

    @property
    def offered_tools(self) -> list[str]:
        """The names of the tools the model sees in this request (none for choice "none")."""
        return [tool["function"]["name"] for tool in self.tools.active_tools] if self.tools is not None else []


class ScriptError(AssertionError):
    """The script or the requests are not what a real backend would see or produce: a mistake in the test."""


# ----- the client -------------------------------------------------------------------------------------------------

class ScriptedClient:
    """A `Client` that answers from a script: `replies[i]` is the reply to the i-th `stream` call."""

    backend = "scripted"

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        capabilities: Capabilities | None = None,
        generation_defaults: GenerationDefaults | None = None,
        remote: bool = False,
    ) -> None:
        """`remote`: behave as a remote server does (activity() is None); otherwise as a local model that writes
        one answer at a time."""
        self.capabilities = capabilities or Capabilities(model_id="scripted-model", native_tools=True,
                                                         dialect="hermes", context_window=4096)
        self.generation_defaults = generation_defaults or GenerationDefaults()
        self.remote = remote
        self.requests: list[Request] = []
        self.closed = False
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._streaming = 0
        for reply in replies:
            self.add_reply(reply)

    def add_reply(self, reply: Reply) -> None:
        """Script one more reply (checked now, so a malformed script fails here and not inside the code tested)."""
        if not isinstance(reply, BaseException):
            reply = list(reply)
            _check_script(reply)
        with self._lock:
            self._replies.append(reply)

    @property
    def replies_left(self) -> int:
        return len(self._replies)

    # ----- the Client protocol ----------------------------------------------------------------------------------

    def describe(self) -> str:
        return f"Scripted replies · {self.capabilities.model_id} · no device"

    def stream(
        self,
        messages: list[dict[str, Any]],
        params: GenerationParams,
        cancel: threading.Event,
        tools: ToolRequest | None = None,
        response_format: ResponseFormat | None = None,
    ) -> Generator[Delta, None, None]:
        _check_arguments(messages, params, cancel, tools, response_format)
        return self._next(Request(copy.deepcopy(messages), params, tools, response_format, cancel))

    def _next(self, request: Request) -> Iterator[Delta]:
        """Record `request` and play it the next scripted reply."""
        if self.closed:
            raise ScriptError("a client that was closed was asked for a reply")
        with self._lock:
            self.requests.append(request)
            if not self._replies:
                asked = f"its prompt: {request.prompt!r}" if request.prompt is not None else \
                    f"its messages: {request.messages}"
                raise ScriptError(f"request {len(self.requests)} has no scripted reply "
                                  f"({len(self.requests) - 1} were scripted); {asked}")
            reply = self._replies.popleft()
        return self._play(request, reply)

    def complete(
        self,
        prompt: str | list[int],
        params: GenerationParams,
        cancel: threading.Event,
        suffix: str | None = None,
    ) -> Generator[Delta, None, None]:
        if not isinstance(prompt, str) and not (isinstance(prompt, list)
                                                and all(type(token) is int for token in prompt)):
            raise ScriptError(f"prompt must be a string or a list of token ids, got {prompt!r}")
        if suffix is not None and not isinstance(suffix, str):
            raise ScriptError(f"suffix must be a string or None, got {suffix!r}")
        _check_arguments([], params, cancel, None, None)
        return self._next(Request([], params, None, None, cancel, prompt=copy.copy(prompt), suffix=suffix))

    def activity(self) -> ModelActivity | None:
        if self.remote:
            return None
        with self._lock:
            generating = min(self._streaming, 1)
            return ModelActivity(generating=generating, waiting=self._streaming - generating, at_once=1)

    def close(self) -> None:
        self.closed = True

    # ----- playing a reply ----------------------------------------------------------------------------------------

    def _play(self, request: Request, reply: Reply) -> Iterator[Delta]:
        metrics = request.metrics
        started = time.perf_counter()
        with self._lock:
            self._streaming += 1
        try:
            if isinstance(reply, BaseException):
                raise reply
            if not reply or (isinstance(reply[-1], Delta) and not reply[-1].finish_reason):
                reply = [*reply, Delta(finish_reason="stop")]
            for item in reply:
                if request.cancel.is_set():  # Stop: the reply ends now, as cancelled
                    metrics.finish_reason = "cancelled"
                    request.delivered.append(delta := Delta(finish_reason="cancelled", metrics=metrics))
                    yield delta
                    return
                if isinstance(item, BaseException):
                    raise item
                delta = replace(item, metrics=metrics, call_fragments=list(item.call_fragments),
                                tool_calls=list(item.tool_calls))
                self._account(request, delta, started)
                request.delivered.append(delta)
                yield delta
        except GeneratorExit:  # the consumer left: before the last delta, real clients abort and say "cancelled"
            if not (request.delivered and request.delivered[-1].finish_reason):
                request.closed_early = True
                metrics.finish_reason = "cancelled"
            raise
        finally:
            with self._lock:
                self._streaming -= 1
            metrics.total_time_s = time.perf_counter() - started

    @staticmethod
    def _account(request: Request, delta: Delta, started: float) -> None:
        """Count the delta in the reply's metrics (one token per delta with content) and check it could be real."""
        metrics = delta.metrics
        if delta.call_fragments or delta.tool_calls:
            if not request.offered_tools:
                raise ScriptError(f"the script returns a tool call to a request that offered no tools "
                                  f"(tool choice {request.tool_choice!r}): no backend would")
        if delta.thinking and request.prompt is not None:
            raise ScriptError("the script returns a thought to a raw completion: no backend splits one off there")
        if delta.text or delta.thinking or delta.call_fragments:
            if metrics.time_to_first_token_s is None:
                metrics.time_to_first_token_s = time.perf_counter() - started
            metrics.completion_tokens += 1
            if delta.thinking:
                metrics.thinking_tokens += 1
                metrics.thinking_time_s = time.perf_counter() - started
        if delta.finish_reason:
            metrics.finish_reason = delta.finish_reason  # type: ignore[assignment]


def _check_script(reply: list[Delta | BaseException]) -> None:
    for position, item in enumerate(reply):
        if isinstance(item, BaseException):
            continue
        if not isinstance(item, Delta):
            raise ScriptError(f"a scripted reply holds Deltas and exceptions, not {item!r}")
        last = position == len(reply) - 1
        if item.finish_reason is not None and (item.finish_reason not in FINISH_REASONS or not last):
            raise ScriptError(f"finish reason {item.finish_reason!r} at delta {position}: a finish reason is one of "
                              f"{', '.join(FINISH_REASONS)} and comes on the last delta only")
        if item.tool_calls and item.finish_reason != "tool_calls":
            raise ScriptError("tool calls come whole on the last delta, with finish reason 'tool_calls' "
                              "(call_reply() writes such a reply)")
        if item.finish_reason == "tool_calls" and not item.tool_calls:
            raise ScriptError("finish reason 'tool_calls' needs the calls on that delta")


def _check_arguments(messages: Any, params: Any, cancel: Any, tools: Any, response_format: Any) -> None:
    """The types the protocol states: the code under test must pass exactly these."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ScriptError(f"messages must be a list of OpenAI-format message dicts, got {messages!r}")
    if not isinstance(params, GenerationParams):
        raise ScriptError(f"params must be GenerationParams, got {params!r}")
    if not isinstance(cancel, threading.Event):
        raise ScriptError(f"cancel must be a threading.Event, got {cancel!r}")
    if tools is not None and not isinstance(tools, ToolRequest):
        raise ScriptError(f"tools must be a ToolRequest or None, got {tools!r}")
    if response_format is not None and not isinstance(response_format, ResponseFormat):
        raise ScriptError(f"response_format must be a ResponseFormat or None, got {response_format!r}")
