"""What an endpoint family opens at its first use rather than at start-up (a database, an embedding model): a server
whose database is down, or whose embedding model cannot load, still answers everything that needs neither."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from app.frontends.api.chat_completions.chat_protocol import APIError

log = logging.getLogger(__name__)
T = TypeVar("T")


class LazyOpen(Generic[T]):
    """`open()` once, at the first `get()`; while it fails (one of `failures`), each `get()` tries again and answers
    503 with `unavailable(the failure)`: what the client reads, so it names no internals it should not."""

    def __init__(self, open: Callable[[], T], unavailable: Callable[[Exception], str],
                 failures: tuple[type[Exception], ...]) -> None:
        self._open, self._unavailable, self._failures = open, unavailable, failures
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                try:
                    self._value = self._open()
                except self._failures as exc:
                    log.warning("Opening failed: %s", exc)
                    raise APIError(503, self._unavailable(exc), kind="service_unavailable") from exc
            return self._value
