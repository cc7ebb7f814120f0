"""Prompt caching for the llama.cpp backend: its one context holds one sequence, and the sequences of other
conversations are kept beside it (app/clients/prefix_store.py) as llama.cpp's own serialised state of a sequence.

Before a request reads its prompt, the context is made to hold the longest prefix of that prompt it can: what the
live sequence already shares with it (the same conversation's previous turn), or a kept sequence that shares more
(another conversation came in between), restored in place of the live one. A live sequence that would lose tokens
worth keeping is kept first. Sessions take turns on the context (the client's lock), so this runs for one request
at a time; llama-cpp-python's `generate` then reads only the tokens past that prefix.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.clients.prefix_store import MIN_REUSE, PrefixStore, PromptCacheStats, shared_prefix

log = logging.getLogger(__name__)

KeptSequence = tuple[np.ndarray, Any]  # the token ids and the ctypes buffer of llama.cpp's state for them


class ContextCache:
    """The live sequence of one llama.cpp context and the kept ones, within `max_bytes` (0: the live one only)."""

    def __init__(self, llama: Any, llama_cpp: Any, max_bytes: int) -> None:
        self.llama, self._lib = llama, llama_cpp
        # A recurrent model's state cannot be cut back to a prefix: it is read whole every time.
        self.enabled = not (llama_cpp.llama_model_is_recurrent(llama.model)
                            or llama_cpp.llama_model_is_hybrid(llama.model))
        self.kept: PrefixStore[KeptSequence] = PrefixStore(max_bytes if self.enabled else 0)

    def stats(self) -> PromptCacheStats:
        return self.kept.stats()

    @property
    def live(self) -> np.ndarray:
        """The token ids the context holds now (llama-cpp-python's record of its sequence)."""
        return np.asarray(self.llama.input_ids[: self.llama.n_tokens], dtype=np.int64)

    def prepare(self, prompt: Sequence[int]) -> int:
        """Make the context hold the longest prefix of `prompt` that is live or kept (all but its last token at
        most: that one's logits pick the first token); how many tokens that is."""
        if not self.enabled:
            self.llama.reset()
            return 0
        limit = len(prompt) - 1
        reused = min(shared_prefix(self.live, prompt), limit)
        if reused < MIN_REUSE:
            # Read whole, as a context of its own would: llama.cpp's results depend slightly on how a sequence was
            # split into batches, so reusing a few tokens would save nothing and still change an answer.
            reused = 0
        kept, state = self.kept.longest(prompt, limit)
        if state is not None and kept >= reused + MIN_REUSE:
            self._keep_live()
            reused = self._restore(state, kept)
        elif self.llama.n_tokens - reused >= MIN_REUSE:
            self._keep_live()  # the tokens past the shared prefix go now
        reused = self._truncate(reused)
        self.kept.count_lookup(reused)
        return reused

    def _keep_live(self) -> None:
        """Keep the live sequence, unless a kept one holds it already."""
        tokens = self.live
        if len(tokens) < MIN_REUSE or self.kept.max_bytes <= 0 or self.kept.holds(tokens):
            return
        lib, ctx = self._lib, self.llama.ctx
        size = lib.llama_state_seq_get_size(ctx, 0)
        if size > self.kept.max_bytes:
            return
        buffer = (ctypes.c_uint8 * size)()
        written = lib.llama_state_seq_get_data(ctx, buffer, size, 0)
        if written:
            self.kept.store(tokens, (tokens, buffer), written)

    def _restore(self, state: KeptSequence, keep: int) -> int:
        """Replace the live sequence with a kept one; how many of its tokens the context holds now."""
        tokens, buffer = state
        lib, ctx = self._lib, self.llama.ctx
        lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), 0, -1, -1)
        self.llama.n_tokens = 0
        if not lib.llama_state_seq_set_data(ctx, buffer, len(buffer), 0):
            log.warning("llama.cpp could not restore a kept sequence; reading the prompt whole")
            return 0
        self.llama.input_ids[: len(tokens)] = tokens
        self.llama.n_tokens = len(tokens)
        return keep

    def _truncate(self, keep: int) -> int:
        """Cut the live sequence to its first `keep` tokens (llama.cpp refuses for some caches: then to none)."""
        lib, llama = self._lib, self.llama
        if keep < llama.n_tokens and not lib.llama_memory_seq_rm(lib.llama_get_memory(llama.ctx), 0, keep, -1):
            keep = 0
        if keep == 0:
            llama.reset()
        llama.n_tokens = keep
        return keep
