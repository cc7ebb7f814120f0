"""Generations in flight, for every endpoint family that generates (chat completions, responses, completions): the
client's blocking stream of deltas read on a thread of its own and handed to the event loop, cancelled as soon as
the requester leaves or the server stops, and counted in the server's metrics once it ends.

Engine time is shared out here: at most `max_running` generations run (each with its thread) at once, server-wide,
and a request that fans out (a completion with many prompts) passes a `share` that bounds how many of its own run
together. Those beyond wait on the event loop, in arrival order and without a thread, so that one request's 400
prompts cannot queue ahead of every other client in the engine."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from opentelemetry.trace import Span

from app.clients.client_protocol import Client, ClientError, Delta, GenerationParams
from app.domain.conversation import AnswerMetrics
from app.frontends.api.chat_completions.chat_protocol import APIError
from app.frontends.api.metrics import ServerMetrics
from app.frontends.api.model_holder import ModelHolder
from app.telemetry import spans

DISCONNECT_POLL_S = 0.1  # how often a request looks whether its client is still there
_END = object()


class DeltaPump:
    """A client's blocking stream of deltas, read on a thread of its own and handed to the event loop. Only that
    thread touches the iterator (closing it included), so a request cancelled mid-read never races it; setting
    `cancel` ends it within a heartbeat. `on_end` is called on that thread once the stream is closed, which
    stops the backend's generation."""

    def __init__(self, deltas: Iterator[Delta], cancel: threading.Event, on_end: Callable[[], None]) -> None:
        self.cancel, self._on_end = cancel, on_end
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        threading.Thread(target=self._read, args=(deltas,), name="api-deltas", daemon=True).start()

    def _read(self, deltas: Iterator[Delta]) -> None:
        try:
            # Closing mid-stream aborts the generation: Client.stream's iterators are generators, which close.
            with closing(deltas):  # type: ignore[type-var]
                for delta in deltas:
                    if self.cancel.is_set():
                        break
                    if not delta.is_heartbeat:  # beats only matter to the reader: they let it see `cancel`
                        self._put(delta)
        except BaseException as exc:  # handed to the request, never lost in the thread
            self._put(exc)
        finally:
            self._on_end()
            self._put(_END)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone: nobody is listening any more
            self.cancel.set()

    async def next(self) -> Delta | None:
        """The next delta; None at the end. A request the backend cannot serve is a 400."""
        item = await self._queue.get()
        if item is _END:
            return None
        if isinstance(item, ClientError):
            raise APIError(400, str(item))
        if isinstance(item, BaseException):
            raise item
        return item


@dataclass(eq=False)
class InFlight:
    """One generation: its deltas, when it started, and whether its client has left."""

    pump: DeltaPump
    span: Span | None = None  # its model call's (app/telemetry/spans.py), ended with it
    started: float = field(default_factory=time.perf_counter)
    client_left: bool = False
    watcher: asyncio.Task[None] | None = None

    def watch(self, request: Request) -> None:
        self.watcher = asyncio.create_task(self._watch(request))

    async def _watch(self, request: Request) -> None:
        """Cancel the generation as soon as the client has gone, whether it waits for a whole answer or a stream."""
        while not self.stopped:
            if await request.is_disconnected():
                self.client_left = True
                self.pump.cancel.set()
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    @property
    def stopped(self) -> bool:
        """Cancelled before the answer was complete: the client left, or the server is shutting down."""
        return self.pump.cancel.is_set()


async def _acquire(semaphore: asyncio.Semaphore, request: Request) -> None:
    """Take a slot of `semaphore`, looking now and then whether the client is still there (499 if it left)."""
    while True:
        try:
            async with asyncio.timeout(10 * DISCONNECT_POLL_S):
                await semaphore.acquire()
            return
        except TimeoutError:
            if await request.is_disconnected():
                raise APIError(499, "The client closed the request.", kind="client_closed_request") from None


class Generations:
    """Every generation this server runs, whichever endpoint started it: each is tracked until it stops, so that
    shutting down can cancel them all, and recorded in the metrics when it ends."""

    def __init__(self, holder: ModelHolder, metrics: ServerMetrics, max_running: int = 64) -> None:
        self.holder, self.metrics = holder, metrics
        self._in_flight: set[InFlight] = set()
        self._running = asyncio.Semaphore(max_running)  # bound to the server's event loop at its first use

    def client_for(self, model: str) -> Client:
        """The loaded client, when `model` names it: 503 while it loads, 404 for another model."""
        client = self.holder.require()
        if model != self.holder.served_name:
            raise APIError(404, f"The model {model!r} does not exist here; this server serves "
                                f"{self.holder.served_name!r}.", param="model", code="model_not_found")
        return client

    async def start(self, request: Request, stream: Callable[[threading.Event], Iterator[Delta]],
                    share: asyncio.Semaphore | None = None, params: GenerationParams | None = None,
                    operation: str = "chat") -> tuple[InFlight, Delta | None]:
        """Start `stream(cancel)` on a thread; the generation and its first delta (None: it ended at once). A
        request that cannot be served raises here, as an HTTP error rather than a broken stream. It first waits for a
        free slot of `share` (the request's own bound, if any), then of the server's; each is released once the
        generation has stopped. A client that leaves while it waits gets a 499. With `params`, the generation is
        traced as a model call (`operation`: "chat" or "text_completion"), a child of the request's span."""
        held: list[asyncio.Semaphore] = []
        try:
            for semaphore in (share, self._running):
                if semaphore is not None:
                    await _acquire(semaphore, request)
                    held.append(semaphore)
        except BaseException:
            for semaphore in held:
                semaphore.release()
            raise
        loop = asyncio.get_running_loop()

        def ended() -> None:  # on the generation's thread, once it has stopped
            self.metrics.in_progress.dec()
            for semaphore in held:
                try:
                    loop.call_soon_threadsafe(semaphore.release)
                except RuntimeError:  # the event loop is gone: nobody waits any more
                    pass

        cancel = threading.Event()
        self.metrics.in_progress.inc()  # down again once the generation has stopped (DeltaPump's on_end)
        span = None if params is None else spans.start_chat(
            None, self.holder.served_name or "", self.holder.require().backend, params, operation=operation)
        flight = InFlight(DeltaPump(stream(cancel), cancel, ended), span)
        flight.watch(request)
        self._in_flight.add(flight)
        try:
            first = await flight.pump.next()
        except asyncio.CancelledError:
            self.done(flight, None, "cancelled")
            raise
        except BaseException:
            self.done(flight, None, "error")
            raise
        return flight, first

    def done(self, flight: InFlight, metrics: AnswerMetrics | None, ended: str) -> None:
        """`flight` ended (`ended`: its finish reason, "cancelled" or "error"): stop it if it still runs, count it."""
        flight.pump.cancel.set()  # a no-op after a complete reply; otherwise it stops the generation
        if flight.watcher is not None:
            flight.watcher.cancel()
        self._in_flight.discard(flight)
        if flight.span is not None:
            spans.end_generation(flight.span, metrics, self.holder.served_name or "", ended)
        if metrics is not None:
            self.metrics.record_answer(metrics, ended, time.perf_counter() - flight.started)

    def cancel_all(self) -> None:
        """Stop every generation still running: the server is shutting down."""
        for flight in list(self._in_flight):
            flight.pump.cancel.set()
