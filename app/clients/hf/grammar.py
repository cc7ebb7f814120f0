"""Constrained decoding for the transformers backend: xgrammar masks every token that would leave the grammar.

One `GrammarProcessor` per reply, for generate() and for the batched decoder alike. It is ours rather than
xgrammar's `contrib.hf.LogitsProcessor` because that example processor (a) advances its matcher inside an `assert`
(gone under `python -O`, and an empty AssertionError otherwise), and (b) masks through xgrammar's CPU kernel, which
ignores the column stride of the logits it is given: a row sliced out of a batch whose logits are laid out
column-major got the wrong tokens masked (and its neighbour row's masked instead), so every constrained reply that
shared the batch with another one failed.

Where the grammar allows only one text next (a call's prefix, JSON's `": "` before a string), the processor also
keeps the model to the tokens its tokenizer makes of that text (`ForcedTokens`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from app.clients.hf.grammar_compile import CACHE_LIMIT_BYTES, DeadlineCompiler


class GrammarViolation(RuntimeError):
    """The reply's own token did not fit its grammar: constrained decoding itself went wrong (never the model)."""


class ForcedTokens:
    """Which tokens may write a text the grammar forces: those the tokenizer itself makes of it.

    The grammar is about characters, so where it forces a text any token that is a piece of it fits, and a small
    model does take odd pieces: after `{"expression":` SmolLM2 wrote a lone space and then `""` (an empty
    expression), or `"` and `}}` and never closed the string, where the tokenizer writes ` "` in one token, as in
    every JSON the model has read (the prompt's example call too). So where the grammar allows only one text next,
    a token that ends inside that text (or at its end) must be the first token of its own tokenization; tokens that
    run past it stay allowed, the grammar checks their rest. Texts whose first token is no piece of them (a
    tokenizer that adds a leading space) are left to the grammar alone."""

    def __init__(self, tokenizer: Any, decoded_vocab: Sequence[bytes]) -> None:
        # The Rust tokenizer: thread-safe, where the Python wrapper's __call__ changes its padding settings.
        self._encode = tokenizer.backend_tokenizer.encode
        self._ids_by_text: dict[bytes, list[int]] = {}
        for token_id, text in enumerate(decoded_vocab):
            if text:
                self._ids_by_text.setdefault(bytes(text), []).append(token_id)
        self._longest = max(map(len, self._ids_by_text), default=0)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, decoded_vocab: Sequence[bytes]) -> ForcedTokens | None:
        """None for a tokenizer without a Rust backend (nothing is restricted then)."""
        return cls(tokenizer, decoded_vocab) if hasattr(tokenizer, "backend_tokenizer") else None

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one per model, kept as long as the model)
    def split(self, forced: str) -> tuple[int, list[int]]:
        """For a `forced` next text: the token to write it with, and the other tokens that end inside it (masked);
        (-1, []) when its first token is not a piece of it."""
        data = forced.encode("utf-8", "surrogatepass")[: self._longest]
        ids = self._encode(forced[: self._longest], add_special_tokens=False).ids
        first = ids[0] if ids else -1
        pieces = [token for end in range(1, len(data) + 1) for token in self._ids_by_text.get(data[:end], ())]
        if first not in pieces:
            return -1, []
        return first, [token for token in pieces if token != first]


class GrammarProcessor(LogitsProcessor):
    """One reply's grammar state: its matcher advances with the tokens of its own `input_ids` row only, whatever else
    is decoded beside it, and the next token's logits outside the grammar become -inf (and, where the grammar
    forces a text, those of tokens that would split it differently from the tokenizer: `ForcedTokens`)."""

    def __init__(self, compiled: Any, vocab_size: int, forced_tokens: ForcedTokens | None = None) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._vocab_size = vocab_size
        self._forced_tokens = forced_tokens
        self._seen: int | None = None  # the length of the reply's ids at the previous call

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != 1 or scores.shape[0] != 1:
            raise ValueError("A grammar processor belongs to one reply: give it one row of ids and of logits.")
        length = input_ids.shape[1]
        if self._seen is not None:  # the tokens chosen since the previous call (one, from generate() or the batch)
            for token in input_ids[0, self._seen:].tolist():
                if not self._matcher.is_terminated() and not self._matcher.accept_token(token):
                    raise GrammarViolation(f"Constrained decoding failed: token {token} does not fit this reply's "
                                           "grammar. Send the message again.")
        self._seen = length
        if self._matcher.is_terminated():  # complete: generation ends with the stop token it allowed last
            return scores
        self._matcher.fill_next_token_bitmask(self._bitmask)
        # The kernel needs row-major float logits on the CPU or CUDA: a copy of this row when they are not.
        device = scores.device
        contiguous = scores.is_contiguous() and device.type in ("cpu", "cuda")
        masked = scores if contiguous else scores.to("cpu" if device.type != "cuda" else device).contiguous()
        self._xgr.apply_token_bitmask_inplace(masked, self._bitmask.to(masked.device),
                                              vocab_size=min(self._vocab_size, masked.shape[-1]))
        self._keep_to_forced_tokens(masked)
        result = masked if masked.device == device else masked.to(device)
        return result  # type: ignore[return-value]  # float logits: transformers' FloatTensor annotation

    def _keep_to_forced_tokens(self, scores: torch.Tensor) -> None:
        forced = self._matcher.find_jump_forward_string() if self._forced_tokens is not None else ""
        if not forced:
            return
        assert self._forced_tokens is not None
        first, others = self._forced_tokens.split(forced)
        # Only where the grammar allows that first token (it may be a special token the mask never allows).
        if others and 0 <= first < scores.shape[-1] and bool(torch.isfinite(scores[0, first])):
            scores[0, [token for token in others if token < scores.shape[-1]]] = float("-inf")


class ConstrainedDecoding:
    """Compiles call grammars for one model's vocabulary; the tokenizer index is built once, on first use. Shared by
    the local engines that mask logits themselves (transformers, llama.cpp)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        """`vocab_size`: the number of logits the model outputs, which may be padded past the tokenizer's; the mask
        must cover every one."""
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = list(stop_token_ids)
        self._compiler: Any = None
        self._forced_tokens: ForcedTokens | None = None
        self._lock = threading.Lock()

    def _grammar_compiler(self) -> Any:
        import xgrammar as xgr

        with self._lock:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self._vocab_size, stop_token_ids=self._stop_token_ids or None
                )
                self._compiler = DeadlineCompiler(xgr.GrammarCompiler(info, cache_limit_bytes=CACHE_LIMIT_BYTES))
                self._forced_tokens = ForcedTokens.for_tokenizer(self._tokenizer, info.decoded_vocab)
            return self._compiler

    def logits_processors(self, ebnf: str) -> LogitsProcessorList:
        """A fresh processor per reply (a matcher is stateful) for the grammar `ebnf`, the same text vLLM's
        structured outputs receive (app/prompting/dialects/constraint.py)."""
        compiled = self._grammar_compiler().compile_grammar(ebnf)
        return LogitsProcessorList([GrammarProcessor(compiled, self._vocab_size, self._forced_tokens)])
