"""Prompt caching for the HF backend: the keys and values of earlier requests (app/clients/prefix_store.py keeps
them), copied into a new request's own cache for the longest prefix it shares with one, so that it reads only the
rest. Entries are never changed by the requests that use them.

Only plain full-attention caches are kept (batch_cache.is_plain_cache): a sliding-window layer has forgotten the
start of its sequence, and a recurrent layer's state cannot be cut back to a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from app.clients.hf.batch_cache import plain_layers
from app.clients.prefix_store import PrefixStore, PromptCacheStats

KeysValues = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys and values [1, heads, positions, head_dim]


class PromptCache:
    """Key/value caches by token ids, least recently used out first beyond `max_bytes`. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self._store: PrefixStore[KeysValues] = PrefixStore(max_bytes)

    @property
    def max_bytes(self) -> int:
        return self._store.max_bytes

    def stats(self) -> PromptCacheStats:
        return self._store.stats()

    def prefill(self, cache: DynamicCache, tokens: Sequence[int], limit: int) -> int:
        """Put into the empty `cache` the keys and values of the longest prefix of `tokens` (at most `limit` of them)
        that an entry holds; how many tokens that is (0: none worth reusing)."""
        shared, layers = self._store.longest(tokens, limit)
        self._store.count_lookup(shared)
        for index, (keys, values) in enumerate(layers or []):  # a copy: the entry stays as it is
            cache.update(keys[..., :shared, :], values[..., :shared, :], index)
        return shared

    def store(self, tokens: Sequence[int], layers: KeysValues) -> None:
        """Keep `layers` (never changed in place from now on) as the keys and values of `tokens`."""
        self._store.store(tokens, layers, sum(keys.nbytes + values.nbytes for keys, values in layers))


def layers_of(cache: DynamicCache, row: int = 0, last: int | None = None) -> KeysValues:
    """One row of a plain cache, as views: its last `last` positions (all when None)."""
    start = 0 if last is None else -last
    return [(layer.keys[row : row + 1, :, start:, :], layer.values[row : row + 1, :, start:, :])
            for layer in plain_layers(cache)]
