"""Compiling a reply's grammar with a time limit, off the caller's thread, each distinct grammar once.

xgrammar's compiler releases the GIL while it works (measured: a 33 s compile stalled another Python thread by
0.1 s at most), so a thread keeps the server's event loop and /health answering. A thread cannot be stopped, so a
compile past the limit keeps running until it is done; the schema size limits (app/limits/schema_limits.py) bound that
to about a second. Running it in a worker process that could be killed instead does not work: a compiled grammar
crosses a process boundary only serialized, and that took 94 s and 625 MB for one that compiled in 0.5 s.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from app.config import SchemaLimits

# xgrammar's compiler keeps every compiled grammar by its text; without a cap, many distinct large schemas would
# grow the process without end (one of 300 alternatives takes 4 MB).
CACHE_LIMIT_BYTES = 256 * 2**20
# Compiles running at once: one past its limit goes on in the background, and a client sending many distinct slow
# schemas must not pile up threads that each take a core.
PARALLEL_COMPILES = 2


class GrammarTooSlow(RuntimeError):
    """The grammar did not compile within the limit."""


class DeadlineCompiler:
    """`compile_grammar(ebnf)` of an xgrammar GrammarCompiler, refused with GrammarTooSlow past the limit
    (SchemaLimits.compile_timeout_s). Requests for a grammar already being compiled wait for that compile rather
    than start another; compiled grammars come from the compiler's own cache, keyed by the grammar's text."""

    def __init__(self, compiler: Any) -> None:
        self._compiler = compiler
        self._compiling: dict[str, Future[Any]] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(PARALLEL_COMPILES)

    def compile_grammar(self, ebnf: str) -> Any:
        timeout_s = SchemaLimits.from_env().compile_timeout_s
        with self._lock:
            future = self._compiling.get(ebnf)
            if future is None:
                future = self._compiling[ebnf] = Future()
                threading.Thread(target=self._compile, args=(ebnf, future, timeout_s), name="grammar-compile",
                                 daemon=True).start()
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            raise GrammarTooSlow(f"compiling it took longer than {timeout_s:g} s; simplify the JSON Schema (fewer "
                                 "enum values or alternatives, shorter patterns)") from None

    def _compile(self, ebnf: str, future: Future[Any], timeout_s: float) -> None:
        try:
            if not self._slots.acquire(timeout=timeout_s):  # its waiters have given up by now: do not start it
                raise GrammarTooSlow(f"{PARALLEL_COMPILES} other grammars were being compiled for {timeout_s:g} s; "
                                     "try again later")
            try:
                future.set_result(self._compiler.compile_grammar(ebnf))
            finally:
                self._slots.release()
        except BaseException as exc:  # handed to every waiter, never lost in the thread
            future.set_exception(exc)
        finally:
            with self._lock:
                del self._compiling[ebnf]  # from now on the compiler's cache answers for this text
