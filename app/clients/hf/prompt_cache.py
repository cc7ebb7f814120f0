"""Prompt caching for the HF backend: the keys and values of earlier requests, kept by their token ids, so that a
request that starts with the same tokens reads only the rest.

A conversation's next turn starts with the whole previous turn (its prompt and, as far as the chat template renders
it the same way, its answer); every conversation on a page starts with the same system prompt and tool schemas. The
cache keeps an entry per request, as the reply that ended left it, least recently used first out once the entries
pass a memory bound (DEMO_PROMPT_CACHE_MB). A lookup finds the entry sharing the longest prefix with the new prompt
and copies that much into the new request's own cache, so entries are never changed by the requests that use them;
tokens are compared exactly, so a request only ever reuses the keys and values of the very same tokens at the very
same positions.

Only plain full-attention caches are kept (batch_cache.is_plain_cache): a sliding-window layer has forgotten the
start of its sequence, and a recurrent layer's state cannot be cut back to a prefix.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count

import numpy as np
import torch
from transformers import DynamicCache

from app.clients.hf.batch_cache import plain_layers

# Fewer shared tokens than this are read again instead: a hit that saves almost nothing is not worth a copy.
MIN_REUSE = 8

KeysValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values [1, heads, positions, head_dim]


@dataclass(frozen=True)
class PromptCacheStats:
    entries: int
    bytes: int
    max_bytes: int
    lookups: int
    hits: int
    cached_tokens: int  # prompt tokens taken from the cache, all lookups together


@dataclass
class _Entry:
    tokens: np.ndarray
    layers: KeysValues
    nbytes: int


class PromptCache:
    """Key/value caches by token ids, least recently used out first beyond `max_bytes`. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # oldest use first
        self._ids = count()
        self._bytes = 0
        self._lookups = self._hits = self._cached_tokens = 0
        self._lock = threading.Lock()

    def stats(self) -> PromptCacheStats:
        with self._lock:
            return PromptCacheStats(len(self._entries), self._bytes, self.max_bytes, self._lookups, self._hits,
                                    self._cached_tokens)

    def prefill(self, cache: DynamicCache, tokens: Sequence[int], limit: int) -> int:
        """Put into the empty `cache` the keys and values of the longest prefix of `tokens` (at most `limit` of them)
        that an entry holds; how many tokens that is (0: none worth reusing)."""
        wanted = np.asarray(tokens[:limit], dtype=np.int64)
        with self._lock:
            self._lookups += 1
            best_key, best = None, 0
            for key, entry in self._entries.items():
                shared = _shared_prefix(entry.tokens, wanted)
                if shared > best:
                    best_key, best = key, shared
            if best_key is None or best < MIN_REUSE:
                return 0
            self._entries.move_to_end(best_key)
            layers = self._entries[best_key].layers
            self._hits += 1
            self._cached_tokens += best
        for index, (keys, values) in enumerate(layers):  # a copy: the entry stays as it is for the next request
            cache.update(keys[..., :best, :], values[..., :best, :], index)
        return best

    def store(self, tokens: Sequence[int], layers: KeysValues) -> None:
        """Keep `layers` (owned by the cache from now on: never changed in place later) as the keys and values of
        `tokens`. Entries that are a prefix of `tokens` go: this one holds everything they hold."""
        if not tokens or self.max_bytes <= 0:
            return
        held = np.asarray(tokens, dtype=np.int64)
        nbytes = sum(keys.nbytes + values.nbytes for keys, values in layers)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            for key, entry in list(self._entries.items()):
                shared = _shared_prefix(entry.tokens, held)
                if shared == len(held):  # already held whole by a longer (or the same) entry
                    self._entries.move_to_end(key)
                    return
                if shared == len(entry.tokens):
                    self._remove(key)
            self._entries[next(self._ids)] = _Entry(held, layers, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                self._remove(next(iter(self._entries)))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _remove(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).nbytes


def layers_of(cache: DynamicCache, row: int = 0, last: int | None = None) -> KeysValues:
    """One row of a plain cache, as views: its last `last` positions (all when None)."""
    start = 0 if last is None else -last
    return [(layer.keys[row : row + 1, :, start:, :], layer.values[row : row + 1, :, start:, :])
            for layer in plain_layers(cache)]


def _shared_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens `a` and `b` have in common."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
