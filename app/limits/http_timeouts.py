"""Time limits for HTTP clients of the API and MCP servers, which uvicorn does not have on its own.

uvicorn closes a kept-alive connection that stays idle between requests, but a connection that sends half a
request's headers and then nothing, or a body one byte at a time, is held open for ever: each such client ties up
a socket, and with a few thousand of them the server can take no new connection. `protocol(timeouts)` is uvicorn's
h11 protocol with two deadlines more: a request's headers must be complete `headers_s` after the connection opens
(or after the first byte of the next request on it), and its body `body_s` after the headers; past either the
connection is closed. A total deadline rather than an idle timeout, because a trickling client is never idle.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.config import HTTPTimeouts


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request is not read in time (see the module)."""

    timeouts = HTTPTimeouts()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._set_deadline(self.timeouts.headers_s)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:  # the next request on a kept-alive one
            self._set_deadline(self.timeouts.headers_s)
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY and not self._reading_body:
            self._reading_body = True
            self._set_deadline(self.timeouts.body_s)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:  # read whole (or the connection is done)
            self._reading_body = False
            self._clear_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_deadline()
        super().connection_lost(exc)

    def _set_deadline(self, seconds: float) -> None:
        self._clear_deadline()
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _clear_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # a request being read learns of it as a disconnect


def uvicorn_options(timeouts: HTTPTimeouts) -> dict[str, Any]:
    """Keyword arguments for uvicorn.run / uvicorn.Config that apply `timeouts`."""
    protocol = type("TimedH11Protocol", (DeadlineH11Protocol,), {"timeouts": timeouts})
    return {"http": protocol, "timeout_keep_alive": max(1, math.ceil(timeouts.keep_alive_s))}
