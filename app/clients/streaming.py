"""The one streaming path every client uses.

A backend only says how to start a request on *its* engine, hand over what the engine produces, and abort it
(`EngineRequest`). Everything else happens here, once, for all of them: heartbeats while the engine is silent
(so a UI notices Stop), Stop itself, stop strings, splitting text from tool calls (`app.chat_format`'s response
processor), timing, token counts, the finish reason and the final tool calls.

Engine outputs cross threads through one queue: the engine's thread (transformers' generate, vLLM's event loop,
the HTTP reader) puts, the consumer's thread takes. Outputs that pile up while the consumer is busy are merged into
one delta, so a slow consumer costs one delta per read, not one per token.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from app.chat_format import ResponseProcessor
from app.clients.base import CallFragment, ClientError, Delta
from app.conversation import AnswerMetrics

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
    error_message: Callable[[BaseException], ClientError] | None = None,
    started: float | None = None,
) -> Iterator[Delta]:
    """Stream one reply: start `engine`, turn its outputs into deltas through `processor`, end with a delta that
    carries the finish reason and the tool calls. `metrics` is updated as tokens arrive (prompt tokens and dropped
    messages are the caller's to fill in; time to first token counts from `started`, default now). Stop
    (`cancel`), a matched stop string and a consumer that stops reading all abort the engine."""
    to_client_error = error_message or (lambda exc: ClientError(f"Generation failed: {exc}"))
    started = started if started is not None else time.perf_counter()
    feed = EngineFeed()
    first = last = None
    engine_reason: str | None = None
    ended = False  # the engine closed the feed: everything it produced has been read
    engine.start(feed)
    try:
        while not cancel.is_set() and not processor.stopped:
            items = feed.take(HEARTBEAT_S)
            if not items:
                yield Delta(metrics=metrics)  # heartbeat: nothing new, but the consumer may look at Stop
                continue
            text: list[str] = []
            fragments: list[CallFragment] = []
            notices: list[str] = []
            for item in items:
                if feed.is_closed_marker(item):
                    ended = True
                    break
                if isinstance(item, BaseException):
                    raise to_client_error(item) from item
                assert isinstance(item, EngineOutput)
                if item.text or item.tokens or item.call_fragments:
                    now = time.perf_counter()
                    first, last = first or now, now
                    if metrics.time_to_first_token_s is None:
                        metrics.time_to_first_token_s = now - started
                metrics.completion_tokens += item.tokens
                if item.usage is not None:
                    metrics.prompt_tokens, metrics.completion_tokens = item.usage
                engine_reason = item.finish_reason or engine_reason
                if item.notice:
                    notices.append(item.notice)
                piece = processor.feed(item.text, item.call_fragments)
                text.append(piece.text)
                fragments.extend(piece.call_fragments)
            if notices or text or fragments:
                yield Delta(text="".join(text), notice=" ".join(notices) or None, metrics=metrics,
                            call_fragments=fragments)
            if ended:
                break
    finally:
        cancelled = not ended and not processor.stopped
        if not ended:  # Stop, a stop string, an error or a consumer that went away: free the engine now
            engine.abort()
        metrics.record_timing(started, first, last)
        if cancelled:  # also right for a consumer that stops reading: it never sees the last delta
            metrics.finish_reason = "cancelled"
    tail, parsed, notice = processor.finish()
    if tail.text or tail.call_fragments or notice:
        yield Delta(text=tail.text, notice=notice, metrics=metrics, call_fragments=tail.call_fragments)
    if cancelled:
        metrics.finish_reason = "cancelled"
    elif parsed.tool_calls:
        metrics.finish_reason = "tool_calls"
    elif engine_reason == "length" and not processor.stopped:
        metrics.finish_reason = "length"
    else:
        metrics.finish_reason = "stop"
    yield Delta(finish_reason=metrics.finish_reason, metrics=metrics, tool_calls=list(parsed.tool_calls))
