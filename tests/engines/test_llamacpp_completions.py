"""Raw text completions (`Client.complete`) on llama.cpp, the embedded SmolLM2 GGUF: the prompt as it is, no chat
template; stop strings, the token limit, Stop, the prompt cache and FIM refusal as the shared path does them."""

from __future__ import annotations

import threading

import pytest

from app.clients.client_protocol import ClientError, GenerationParams
from tests.helpers import complete

PARIS = "The capital of France is"


def test_a_text_prompt_is_continued_raw_and_its_ids_alike(gguf_client):
    params = GenerationParams(temperature=0.0, max_new_tokens=4)
    text, deltas = complete(gguf_client, PARIS, params)
    ids = gguf_client.tokenizer(PARIS)["input_ids"]
    metrics = deltas[-1].metrics
    assert text.startswith(" Paris") and deltas[-1].finish_reason == "length"
    assert (metrics.prompt_tokens, metrics.completion_tokens) == (len(ids), 4)  # no chat template around it
    assert complete(gguf_client, ids, params)[0] == text
    # A longer prompt again: llama.cpp's context holds all of it but the last token (whose logits pick the first).
    longer = f"A geography lesson for a class of young students, about the capitals of Europe. {PARIS}"
    first, _ = complete(gguf_client, longer, params)
    again, deltas = complete(gguf_client, longer, params)
    assert again == first and deltas[-1].metrics.cached_tokens == deltas[-1].metrics.prompt_tokens - 1


def test_a_stop_string_ends_it_and_stop_cancels_it(gguf_client):
    text, deltas = complete(gguf_client, PARIS, GenerationParams(temperature=0.0, max_new_tokens=12, stop=(".",)))
    assert text == " Paris" and deltas[-1].finish_reason == "stop"
    cancel = threading.Event()
    received = []
    for delta in gguf_client.complete("Once upon a time", GenerationParams(temperature=0.0, max_new_tokens=500,
                                                                           ignore_eos=True), cancel):
        received.append(delta)
        if sum(1 for d in received if d.text) == 2:
            cancel.set()
    assert received[-1].finish_reason == "cancelled" and received[-1].metrics.completion_tokens < 500


def test_a_suffix_or_a_prompt_too_long_is_refused(gguf_client):
    with pytest.raises(ClientError, match="cannot fill in the middle"):
        complete(gguf_client, "def add(a, b):\n", GenerationParams(max_new_tokens=4), suffix="\n    return c")
    with pytest.raises(ClientError, match="2048-token context window"):
        complete(gguf_client, [1] * 2048, GenerationParams(max_new_tokens=4))
