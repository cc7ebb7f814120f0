"""Constrained decoding for transformers' generate(): xgrammar masks every token that would leave the grammar."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from transformers import LogitsProcessorList



class ConstrainedDecoding:
    """Compiles call grammars for one model's vocabulary; the tokenizer index is built once, on first use."""

    def __init__(self, tokenizer: Any, model: Any, stop_token_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._model = model
        self._stop_token_ids = list(stop_token_ids)
        self._compiler: Any = None
        self._lock = threading.Lock()

    def _grammar_compiler(self) -> Any:
        import xgrammar as xgr

        with self._lock:
            if self._compiler is None:
                # The mask must cover every logit, and the model's output layer may be padded past the tokenizer.
                vocab_size = self._model.get_output_embeddings().weight.shape[0]
                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=vocab_size, stop_token_ids=self._stop_token_ids or None
                )
                self._compiler = xgr.GrammarCompiler(info)
            return self._compiler

    def logits_processors(self, ebnf: str) -> LogitsProcessorList:
        """A fresh processor per generate() call (xgrammar's matcher is stateful) for the grammar `ebnf`, the same
        text vLLM's structured outputs receive (app/dialects/constraint.py)."""
        import xgrammar.contrib.hf as xgr_hf

        compiled = self._grammar_compiler().compile_grammar(ebnf)
        return LogitsProcessorList([xgr_hf.LogitsProcessor(compiled)])
