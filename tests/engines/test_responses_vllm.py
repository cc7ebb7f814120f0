"""Our POST /v1/responses on the vLLM backend, side by side with vLLM's own server's /v1/responses (the peer a user
would point Codex CLI or the Agents SDK at instead), both on SmolLM2 through the openai SDK: the same greedy text,
the same token counts, and the same shape of event stream."""

from __future__ import annotations

import itertools

import openai
import pytest

from app.config import ServerSettings
from app.frontends.api.server_app import create_app
from app.storage import open_database
from app.storage.responses import ResponseStore
from harness.local_http import serving

QUESTION = "What is the capital of France?"
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def both(vllm_smol, vllm_server, tmp_path_factory):
    """Our server on the vLLM engine, served under vLLM's server's model name, and vLLM's own server."""
    store = ResponseStore(open_database(f"sqlite:///{tmp_path_factory.mktemp('responses')}/api.db"))
    with serving(create_app(ServerSettings(served_name="smollm2"), client=vllm_smol, response_store=store)) as base:
        yield {"ours": openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0),
               "vllm": openai.OpenAI(base_url=vllm_server, api_key="none", max_retries=0)}


def test_the_same_greedy_answer_and_token_counts_as_vllms_server(both):
    answers = {name: sdk.responses.create(model="smollm2", input=QUESTION, max_output_tokens=24, temperature=0.0,
                                          store=False) for name, sdk in both.items()}
    ours, theirs = answers["ours"], answers["vllm"]
    assert ours.output_text == theirs.output_text and "Paris" in ours.output_text
    assert ours.status == theirs.status
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (theirs.usage.input_tokens,
                                                                  theirs.usage.output_tokens)


def test_the_same_shape_of_event_stream_as_vllms_server(both):
    shapes = {}
    for name, sdk in both.items():
        with sdk.responses.stream(model="smollm2", input=QUESTION, max_output_tokens=24, temperature=0.0,
                                  store=False) as stream:
            events = list(stream)
        assert [event.sequence_number for event in events] == list(range(len(events)))
        shapes[name] = [kind for kind, _ in itertools.groupby(event.type for event in events)]
    assert shapes["ours"] == shapes["vllm"], shapes


def test_a_forced_function_call_like_vllms_server(both):
    calls = {}
    for name, sdk in both.items():
        response = sdk.responses.create(model="smollm2", input="What is the weather in Paris?", tools=[WEATHER],
                                        tool_choice="required", temperature=0.0, store=False)
        calls[name] = [(item.type, item.name) for item in response.output if item.type == "function_call"]
    assert calls["ours"] == calls["vllm"] == [("function_call", "get_weather")]
