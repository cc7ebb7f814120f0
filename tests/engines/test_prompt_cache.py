"""Prompt caching on the HF backend (app/clients/hf/prompt_cache.py): a request that starts like an earlier one reads
only the rest, and its answer is the answer it gets without the cache: alone, batched with others, after Stop, in the
generate() path, on a tiny model and on the real SmolLM2."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import torch
from transformers import DynamicCache

from app.clients.choice import default_backend
from app.clients.client_protocol import GenerationParams
from app.clients.hf.hf_client import HFClient
from app.clients.hf.prompt_cache import PromptCache
from app.config import ModelSettings
from tests.engines.test_hf_batching import at_once
from tests.helpers import collect
from tests.tiny_model import TEST_DEVICE

GREEDY = GenerationParams(temperature=0.0, max_new_tokens=24)
SYSTEM = {"role": "system", "content": "You are a careful assistant for a shop. " * 8}


def conversation(topic: str, turns: int) -> list[dict[str, str]]:
    messages = [SYSTEM]
    for i in range(turns):
        messages += [{"role": "user", "content": f"Question {i} about {topic}: what do you know?"},
                     {"role": "assistant", "content": f"Answer {i}: {topic} is interesting in many ways."}]
    return messages + [{"role": "user", "content": f"One more thing about {topic}?"}]


def answer(client: HFClient, messages, params=GREEDY) -> tuple[str, int, int]:
    """The answer's text, its prompt tokens and how many of them came from the cache."""
    text, deltas = collect(client, messages, params)
    metrics = deltas[-1].metrics
    return text, metrics.prompt_tokens, metrics.cached_tokens


def client_for(model_dir, dtype: str = "float32", **settings) -> HFClient:
    return HFClient(ModelSettings(dtype=dtype, model_path=str(model_dir), device=TEST_DEVICE, **settings))


@pytest.fixture(scope="module")
def uncached(tiny_model_dir):
    client = client_for(tiny_model_dir, prompt_cache_mb=0)
    yield client
    client.close()


@pytest.fixture(params=[8, 1], ids=["batched", "generate"])
def cached(request, tiny_model_dir):
    client = client_for(tiny_model_dir, hf_max_batch=request.param)
    yield client
    client.close()


def kv(tokens: int, width: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, 1, tokens, width), float(tokens)), torch.zeros(1, 1, tokens, width))]


def test_the_cache_keeps_the_longest_prefix_and_forgets_the_least_recently_used():
    entry_bytes = 2 * 4 * 20 * 4  # keys and values, 20 tokens of 4 floats each
    cache = PromptCache(max_bytes=2 * entry_bytes)
    first, second = list(range(20)), [*range(10), *range(50, 60)]
    cache.store(first, kv(20))
    cache.store(second, kv(20))
    target = DynamicCache()
    assert cache.prefill(target, [*range(19), 99, 100], limit=20) == 19  # shares 19 tokens with the first entry
    assert target.get_seq_length() == 19 and target.layers[0].keys[0, 0, 0, 0] == 20.0
    cache.store(list(range(100, 120)), kv(20))  # over the bound: the second entry, used least recently, goes
    stats = cache.stats()
    assert (stats.entries, stats.bytes) == (2, 2 * entry_bytes)
    assert cache.prefill(DynamicCache(), second, limit=20) == 10  # only what it shares with the first one
    assert cache.prefill(DynamicCache(), [1, 2, 3, 4, 5, 6, 7, 8, 9], limit=9) == 0  # nothing starts so
    assert cache.prefill(DynamicCache(), first, limit=5) == 0  # too short a prefix to be worth a copy
    cache.store(list(range(30)), kv(30))  # holds all the first entry holds: that one goes (and the third, the bound)
    assert cache.stats().entries == 1 and cache.prefill(DynamicCache(), list(range(40)), limit=39) == 30
    assert (cache.stats().lookups, cache.stats().hits, cache.stats().cached_tokens) == (5, 3, 19 + 10 + 30)


def test_a_follow_up_turn_reads_only_its_new_tokens_and_answers_as_without_the_cache(cached, uncached):
    first = conversation("umbrellas", 2)
    text, first_prompt, cached_tokens = answer(cached, first)
    assert (text, cached_tokens) == (answer(uncached, first)[0], 0)
    follow_up = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "And the price?"}]
    text, prompt_tokens, cached_tokens = answer(cached, follow_up)
    assert text == answer(uncached, follow_up)[0]
    # The whole first prompt at least; of the answer, what its text encodes to again (a random model's tokens are
    # seldom the ones the tokenizer picks for their text).
    assert first_prompt <= cached_tokens < prompt_tokens


def test_concurrent_conversations_sharing_a_system_prompt_never_mix(tiny_client, uncached):
    """Eight conversations at once, all with the same long system prompt and some with the same first turns: each gets
    the answer it gets alone, with no cache, turn after turn."""
    topics = ["tea", "kites", "maps", "tea", "owls", "glass", "rope", "kites"]
    histories = [conversation(topic, 1 + i % 3) for i, topic in enumerate(topics)]
    for _ in range(2):
        expected = [answer(uncached, history)[0] for history in histories]
        results = at_once([lambda h=h: answer(tiny_client, h) for h in histories], stagger_s=0.05)
        assert [text for text, _, _ in results] == expected
        assert sum(1 for _, _, hit in results if hit) >= 4  # the system prompt, at least, once the first is in
        histories = [[*h, {"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
                     for h, text in zip(histories, expected, strict=True)]


def test_a_stopped_answer_is_cached_as_far_as_it_went(tiny_model_dir, uncached):
    client = client_for(tiny_model_dir)
    try:
        messages = conversation("sails", 3)
        stop = threading.Event()
        text = ""
        for delta in client.stream(messages, GenerationParams(temperature=0.0, max_new_tokens=200), stop):
            text += delta.text
            if len(text) > 10:
                stop.set()
        regenerated, prompt_tokens, cached_tokens = answer(client, messages)
        assert cached_tokens == prompt_tokens - 1  # the whole prompt but the token whose logits pick the first one
        assert regenerated == answer(uncached, messages)[0]
    finally:
        client.close()


def test_the_memory_bound_is_a_setting_and_zero_turns_the_cache_off(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("DEMO_PROMPT_CACHE_MB", "0")
    assert ModelSettings.from_env(default_backend).prompt_cache_mb == 0
    monkeypatch.setenv("DEMO_PROMPT_CACHE_MB", "64")
    client = HFClient(replace(ModelSettings.from_env(default_backend), model_path=str(tiny_model_dir),
                      device=TEST_DEVICE))
    try:
        assert "prompt cache 64 MB" in client.describe()
        answer(client, conversation("bells", 1))
        stats = client.prompt_cache.stats()
        assert stats.max_bytes == 64 * 2**20 and 0 < stats.bytes <= stats.max_bytes
    finally:
        client.close()


@pytest.mark.model
def test_smollm2_answers_a_follow_up_from_the_cache_as_it_does_without(smol_client, smollm2_dir):
    plain = client_for(smollm2_dir, dtype="auto", prompt_cache_mb=0)  # the precision smol_client loads in
    try:
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        text, _, _ = answer(smol_client, messages)
        follow_up = [*messages, {"role": "assistant", "content": text},
                     {"role": "user", "content": "And what is the capital of Germany?"}]
        again, prompt_tokens, cached_tokens = answer(smol_client, follow_up)
        assert again == answer(plain, follow_up)[0] and "Berlin" in again
        assert cached_tokens >= prompt_tokens - 20
    finally:
        plain.close()
