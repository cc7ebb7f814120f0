"""A TextIteratorStreamer that detokenises incrementally and counts tokens as they are generated.

transformers' own TextStreamer re-decodes every token since the last newline on each step, which is quadratic
on long lines. Here each step decodes only a small window (the technique vLLM and TGI use): the text of the
tokens already emitted plus the new ones, minus the text already emitted. A window that ends inside a
multi-byte character (decodes to U+FFFD) waits for the next token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from transformers import TextIteratorStreamer

REPLACEMENT_CHAR = "\ufffd"


class IncrementalTextStreamer(TextIteratorStreamer):
    """Iterate text chunks (no timeout: a long prefill must not crash the reader).

    `on_token(count)` is called from the generating thread for each completion token, with the running count.
    """

    def __init__(self, tokenizer: Any, on_token: Callable[[int], None] | None = None) -> None:
        super().__init__(tokenizer, skip_prompt=True, timeout=None, skip_special_tokens=True)
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._on_token = on_token
        self._prompt_seen = False
        self.last_token_id: int | None = None
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self._ids)

    def put(self, value: Any) -> None:
        if not self._prompt_seen:  # generate() first hands over the prompt
            self._prompt_seen = True
            return
        new_ids = [int(token) for token in value.reshape(-1).tolist()]
        if not new_ids:
            return
        now = time.perf_counter()
        if self.first_token_time is None:
            self.first_token_time = now
        self.last_token_time = now
        self._ids.extend(new_ids)
        self.last_token_id = new_ids[-1]
        if self._on_token is not None:
            self._on_token(len(self._ids))
        text = self._decode_new()
        if text:
            self.on_finalized_text(text)

    def _decode_new(self, final: bool = False) -> str:
        decode = self.tokenizer.decode
        prefix_text = decode(self._ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        full_text = decode(self._ids[self._prefix_offset :], skip_special_tokens=True)
        if len(full_text) > len(prefix_text) and (final or not full_text.endswith(REPLACEMENT_CHAR)):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def end(self) -> None:
        self.on_finalized_text(self._decode_new(final=True), stream_end=True)
