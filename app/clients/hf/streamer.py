"""A generate() streamer that detokenises incrementally and hands each step's text and token count on.

transformers' own TextStreamer re-decodes every token since the last newline on each step, which is quadratic
on long lines. Here each step decodes only a small window (the technique vLLM and TGI use): the text of the
tokens already emitted plus the new ones, minus the text already emitted. A window that ends inside a
multi-byte character (decodes to U+FFFD) waits for the next token. There is no queue of its own: the text goes
straight to the shared streaming helper's feed (app/clients/streaming.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers.generation.streamers import BaseStreamer

REPLACEMENT_CHAR = "\ufffd"


class IncrementalTextStreamer(BaseStreamer):
    """Calls `emit(text, new_tokens)` from the generating thread for every generated step. generate() hands over
    the prompt first, which is skipped; a caller that passes only new tokens says `prompt_first=False`."""

    def __init__(self, tokenizer: Any, emit: Callable[[str, int], None], prompt_first: bool = True) -> None:
        self.tokenizer = tokenizer
        self._emit = emit
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._prompt_seen = not prompt_first
        self.last_token_id: int | None = None

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
        self._ids.extend(new_ids)
        self.last_token_id = new_ids[-1]
        self._emit(self._decode_new(), len(new_ids))

    def _decode_new(self, final: bool = False) -> str:
        decode = self.tokenizer.decode
        prefix_text: str = decode(self._ids[self._prefix_offset : self._read_offset], skip_special_tokens=True)
        full_text: str = decode(self._ids[self._prefix_offset :], skip_special_tokens=True)
        if len(full_text) > len(prefix_text) and (final or not full_text.endswith(REPLACEMENT_CHAR)):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def end(self) -> None:
        tail = self._decode_new(final=True)
        if tail:
            self._emit(tail, 0)
