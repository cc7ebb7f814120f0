"""The bookkeeping of a prompt cache, for every local engine that keeps one: entries of engine state (keys and
values, however the engine holds them) by the token ids they hold, least recently used out first once they pass a
memory bound (DEMO_PROMPT_CACHE_MB).

A conversation's next turn starts with the whole previous turn (its prompt and, as far as the chat template renders
it the same way, its answer); every conversation on a page starts with the same system prompt and tool schemas. A
lookup finds the entry sharing the longest prefix with a new prompt; tokens are compared exactly, so a request only
ever reuses the state of the very same tokens at the very same positions. An entry that holds everything another
holds replaces it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Generic, TypeVar

import numpy as np

# Fewer shared tokens than this are read again instead: a hit that saves almost nothing is not worth a copy.
MIN_REUSE = 8

State = TypeVar("State")
TokenIds = Sequence[int] | np.ndarray


@dataclass(frozen=True)
class PromptCacheStats:
    entries: int
    bytes: int
    max_bytes: int
    lookups: int
    hits: int
    cached_tokens: int  # prompt tokens taken from the cache, all lookups together


@dataclass
class _Entry(Generic[State]):
    tokens: np.ndarray
    state: State
    nbytes: int


class PrefixStore(Generic[State]):
    """Engine states by the token ids they hold, within `max_bytes`. Thread-safe. States are never changed once
    stored: a request that reuses one copies from it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry[State]] = OrderedDict()  # oldest use first
        self._ids = count()
        self._bytes = 0
        self._lookups = self._hits = self._cached_tokens = 0
        self._lock = threading.Lock()

    def stats(self) -> PromptCacheStats:
        with self._lock:
            return PromptCacheStats(len(self._entries), self._bytes, self.max_bytes, self._lookups, self._hits,
                                    self._cached_tokens)

    def longest(self, tokens: TokenIds, limit: int) -> tuple[int, State | None]:
        """The entry sharing the longest prefix with `tokens`: how many tokens it shares (at most `limit`) and its
        state; (0, None) when none shares MIN_REUSE tokens."""
        wanted = np.asarray(tokens[:limit], dtype=np.int64)
        with self._lock:
            best_key, best = None, 0
            for key, entry in self._entries.items():
                shared = shared_prefix(entry.tokens, wanted)
                if shared > best:
                    best_key, best = key, shared
            if best_key is None or best < MIN_REUSE:
                return 0, None
            self._entries.move_to_end(best_key)
            return best, self._entries[best_key].state

    def count_lookup(self, cached_tokens: int) -> None:
        """One request looked up, and how many of its prompt tokens it took from the cache (or the live context)."""
        with self._lock:
            self._lookups += 1
            self._hits += cached_tokens > 0
            self._cached_tokens += cached_tokens

    def holds(self, tokens: TokenIds) -> bool:
        """Some entry holds all of `tokens`."""
        wanted = np.asarray(tokens, dtype=np.int64)
        with self._lock:
            return any(shared_prefix(entry.tokens, wanted) == len(wanted) for entry in self._entries.values())

    def store(self, tokens: TokenIds, state: State, nbytes: int) -> None:
        """Keep `state` as that of `tokens` (unless it alone is over the bound). Entries that are a prefix of
        `tokens` go: this one holds everything they hold."""
        if not len(tokens) or nbytes > self.max_bytes:
            return
        held = np.asarray(tokens, dtype=np.int64)
        with self._lock:
            for key, entry in list(self._entries.items()):
                shared = shared_prefix(entry.tokens, held)
                if shared == len(held):  # already held whole by a longer (or the same) entry
                    self._entries.move_to_end(key)
                    return
                if shared == len(entry.tokens):
                    self._remove(key)
            self._entries[next(self._ids)] = _Entry(held, state, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def _remove(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes


def shared_prefix(a: TokenIds, b: TokenIds) -> int:
    """How many leading tokens `a` and `b` have in common."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n
