"""The one streaming path every client uses.

A backend only says how to start a request on *its* engine, hand over what the engine produces, and abort it
(`EngineRequest`). Everything else happens here, once, for all of them: heartbeats while the engine is silent
(so a UI notices Stop), Stop itself, stop strings, splitting text from tool calls (`app.prompting.chat_format`'s
response processor), timing, token counts, the finish reason and the final tool calls.

Engine outputs cross threads through one queue: the engine's thread (transformers' generate, vLLM's event loop,
the HTTP reader) puts, the consumer's thread takes. Outputs that pile up while the consumer is busy are merged into
one delta, so a slow consumer costs one delta per read, not one per token.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from app.clients.client_protocol import CallFragment, ClientError, Delta
from app.domain.conversation import AnswerMetrics
from app.prompting.chat_format import ResponseProcessor

HEARTBEAT_S = 0.25


@dataclass
class EngineOutput:
    """What an engine produced since its previous output."""

    text: str = ""
    tokens: int = 0  # completion tokens this output adds (engines that count them; see `usage`)
    call_fragments: list[CallFragment] = field(default_factory=list)  # native tool-call deltas (remote servers)
    finish_reason: str | None = None  # on the last output: the engine's reason, "stop" or "length"
    usage: tuple[int, int] | None = None  # (prompt, completion) tokens, from engines that report totals
    notice: str | None = None  # something the user should know now (e.g. queued behind another session)
    thinking: str = ""  # a reasoning model's thought, from servers that send it apart (reasoning_content)
    cached_tokens: int | None = None  # prompt tokens the engine took from its prompt cache instead of reading them


class EngineFeed:
    """The hand-over from an engine's thread to the consumer. The engine calls `put` per output, `fail` on an
    error, and `close` when it will put nothing more (always, also after a failure)."""

    _CLOSED = object()

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()

    def put(self, output: EngineOutput) -> None:
        self._queue.put(output)

    def fail(self, error: BaseException) -> None:
        self._queue.put(error)

    def close(self) -> None:
        self._queue.put(self._CLOSED)

    def take(self, timeout: float) -> list[object]:
        """Everything queued now, waiting up to `timeout` for the first item; [] when nothing came."""
        try:
            items = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                return items

    def is_closed_marker(self, item: object) -> bool:
        return item is self._CLOSED


class EngineRequest(Protocol):
    """One request on a backend's engine: all a client implements to stream."""

    def start(self, feed: EngineFeed) -> None:
        """Begin generating on the engine's own thread or event loop, handing outputs to `feed`."""
        ...

    def abort(self) -> None:
        """Stop generating soon and free the engine's resources; `feed` may stay open after this."""
        ...


def stream_engine(
    engine: EngineRequest,
    processor: ResponseProcessor,
    cancel: threading.Event,
    metrics: AnswerMetrics,
    to_client_error: Callable[[BaseException], ClientError],
    started: float | None = None,
) -> Generator[Delta, None, None]:
    """Stream one reply: start `engine`, turn its outputs into deltas through `processor`, end with a delta that
    carries the finish reason and the tool calls. `metrics` is updated as tokens arrive (prompt tokens and dropped
    messages are the caller's to fill in; time to first token counts from `started`, default now). An engine
    failure is raised as `to_client_error(failure)`. Stop (`cancel`), a matched stop string and a consumer that
    stops reading all abort the engine."""
    reply = _Reply(processor, metrics, started if started is not None else time.perf_counter(), cancel)
    feed = EngineFeed()
    engine.start(feed)
    try:
        while not cancel.is_set() and not processor.stopped and not reply.ended:
            items = feed.take(HEARTBEAT_S)
            for item in items:
                if isinstance(item, BaseException):
                    raise to_client_error(item) from item
            delta = reply.absorb(items, feed)
            if delta is not None or not items:  # nothing at all: a heartbeat, so the consumer may look at Stop
                yield delta or Delta(metrics=metrics)
    finally:
        if not reply.ended:  # Stop, a stop string, an error or a consumer that went away: free the engine now
            engine.abort()
        reply.close()
    yield from reply.last_deltas()


class _Reply:
    """What has been read of one reply: timing, the engine's own finish reason, whether the engine is done."""

    def __init__(self, processor: ResponseProcessor, metrics: AnswerMetrics, started: float,
                 cancel: threading.Event) -> None:
        self.processor, self.metrics, self.started, self.cancel = processor, metrics, started, cancel
        self.first: float | None = None
        self.last: float | None = None
        self.engine_reason: str | None = None
        self.ended = False  # the engine closed the feed: everything it produced has been read

    def absorb(self, items: list[object], feed: EngineFeed) -> Delta | None:
        """Outputs that arrived together, as one delta (None when they add nothing to show)."""
        text: list[str] = []
        thinking: list[str] = []
        fragments: list[CallFragment] = []
        notices: list[str] = []
        for item in items:
            if feed.is_closed_marker(item):
                self.ended = True
                break
            assert isinstance(item, EngineOutput)
            self._count(item)
            if item.notice:
                notices.append(item.notice)
            was_in_thought = self.processor.in_thought
            piece = self.processor.feed(item.text, item.call_fragments, item.thinking)
            text.append(piece.text)
            thinking.append(piece.thinking)
            fragments.extend(piece.call_fragments)
            if (piece.thinking or was_in_thought or self.processor.in_thought) and not piece.text:
                self._count_thought(item)  # its markers included: they are tokens of the thought too
        joined, thought = "".join(text), "".join(thinking)
        if not (joined or thought or fragments or notices):
            return None
        return Delta(text=joined, notice=" ".join(notices) or None, metrics=self.metrics, call_fragments=fragments,
                     thinking=thought)

    def _count_thought(self, output: EngineOutput) -> None:
        """Tokens of the thought and how long it took. A server that sends thoughts apart says no token counts per
        chunk: one chunk is one token there (vLLM streams them so)."""
        self.metrics.thinking_tokens += output.tokens or 1
        self.metrics.thinking_time_s = time.perf_counter() - self.started

    def _count(self, output: EngineOutput) -> None:
        if output.text or output.tokens or output.call_fragments or output.thinking:
            now = time.perf_counter()
            self.first, self.last = self.first or now, now
            if self.metrics.time_to_first_token_s is None:
                self.metrics.time_to_first_token_s = now - self.started
        self.metrics.completion_tokens += output.tokens
        if output.usage is not None:
            self.metrics.prompt_tokens, self.metrics.completion_tokens = output.usage
        if output.cached_tokens is not None:
            self.metrics.cached_tokens = output.cached_tokens
        self.engine_reason = output.finish_reason or self.engine_reason

    @property
    def cancelled(self) -> bool:
        """Stopped before the end: by the consumer, or by an engine that saw Stop first and ended without a
        reason of its own."""
        if self.processor.stopped:
            return False
        return not self.ended or (self.engine_reason is None and self.cancel.is_set())

    def close(self) -> None:
        """Timing, and "cancelled" already: a consumer that stops reading never sees the last delta."""
        self.metrics.record_timing(self.started, self.first, self.last)
        if self.cancelled:
            self.metrics.finish_reason = "cancelled"

    def last_deltas(self) -> Iterator[Delta]:
        """The rest of the text and call pieces, then the finish reason with the calls."""
        tail, parsed, notice = self.processor.finish()
        if tail.text or tail.call_fragments or notice or tail.thinking:
            yield Delta(text=tail.text, notice=notice, metrics=self.metrics, call_fragments=tail.call_fragments,
                        thinking=tail.thinking)
        if self.cancelled:
            self.metrics.finish_reason = "cancelled"
        elif parsed.tool_calls:
            self.metrics.finish_reason = "tool_calls"
        elif self.engine_reason == "length" and not self.processor.stopped:
            self.metrics.finish_reason = "length"
        else:
            self.metrics.finish_reason = "stop"
        yield Delta(finish_reason=self.metrics.finish_reason, metrics=self.metrics, tool_calls=list(parsed.tool_calls))
