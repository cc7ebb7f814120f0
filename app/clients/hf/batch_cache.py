"""The key/value cache of the replies the HF backend decodes together (app/clients/hf/batch.py).

Each reply is prefilled alone into a cache of its own, then joins the batch: the caches' rows are left-padded to one
length and stacked, and a mask hides the padding from attention. A reply that ends leaves by dropping its row, and
columns that have become padding in every row are cut off, so the batch is never longer than its longest reply.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def is_plain_cache(cache: DynamicCache) -> bool:
    """Full-attention layers only: rows of such a cache can be padded, stacked and dropped. (Sliding-window,
    linear-attention and quantised layers keep other state; models with them are not batched.)"""
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def has_plain_cache(model: Any) -> bool:
    """The cache `model` builds is a plain one (is_plain_cache): the only kind that can be batched and kept in the
    prompt cache (app/clients/hf/prompt_cache.py)."""
    try:
        return is_plain_cache(DynamicCache(config=model.config))
    except Exception:  # a config the cache cannot read
        return False


class BatchCache:
    """One DynamicCache for the batch, its rows left-padded to a common length, and the attention mask [rows,
    length] that is False on the padding."""

    def __init__(self) -> None:
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return 0 if self.mask is None else self.mask.shape[0]

    @property
    def length(self) -> int:
        return 0 if self.mask is None else self.mask.shape[1]

    def add(self, cache: DynamicCache) -> None:
        """Append a lone reply's cache (one row, no padding) as the batch's last row."""
        length = plain_layers(cache)[0].keys.shape[-2]
        mask = torch.ones((1, length), dtype=torch.bool, device=plain_layers(cache)[0].keys.device)
        if self.cache is None or self.mask is None:
            self.cache, self.mask = cache, mask
            return
        target = max(self.length, length)
        for mine, theirs in zip(plain_layers(self.cache), plain_layers(cache), strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, target), _pad_left(theirs.keys, target)])
            mine.values = torch.cat([_pad_left(mine.values, target), _pad_left(theirs.values, target)])
        self.mask = torch.cat([_pad_left(self.mask, target), _pad_left(mask, target)])

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (in that order); then cut the columns that are padding in every row left."""
        if self.cache is None or self.mask is None:
            return
        if not rows:
            self.cache = self.mask = None
            return
        index = torch.tensor(rows, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        first = int(mask.any(dim=0).int().argmax())  # the first column some row still uses
        self.mask = mask[:, first:]
        for layer in plain_layers(self.cache):  # a model spread over several GPUs has its layers on several devices
            rows_here = index.to(layer.keys.device)
            layer.keys = layer.keys.index_select(0, rows_here)[..., first:, :]
            layer.values = layer.values.index_select(0, rows_here)[..., first:, :]

    def grow(self) -> torch.Tensor:
        """The mask for a decode step: one more real column for the token every row feeds now."""
        assert self.mask is not None
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.rows, 1))], dim=1)
        return self.mask


def _pad_left(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """Zeros (False for a mask) before the sequence axis: the last axis of a mask, the one before it of keys."""
    axis = -1 if tensor.dim() == 2 else -2
    missing = length - tensor.shape[axis]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[axis] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=axis)


def plain_layers(cache: DynamicCache) -> list[Any]:
    """The cache's layers, each with `keys` and `values` [rows, heads, positions, head_dim]: a plain cache's
    (is_plain_cache), whose layers all hold both (transformers types them as a union with attention-free layers)."""
    return list(cache.layers)
