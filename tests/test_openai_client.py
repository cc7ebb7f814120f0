"""The OpenAI-compatible backend against vLLM's own OpenAI server on 127.0.0.1 (serving the embedded SmolLM2)."""

from __future__ import annotations

import json
import threading

import pytest

from app.agent import ToolSettings, run_turn
from app.clients.base import ClientError, GenerationParams, ResponseFormat, ToolRequest
from app.clients.openai import OpenAIClient
from app.config import ModelSettings
from app.conversation import Conversation, Message
from app.tools import load_tools
from tests.helpers import collect

registry = load_tools()
CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


def client_for(base_url, **overrides):
    return OpenAIClient(ModelSettings(backend="openai", api_base_url=base_url, **overrides))


def test_streams_an_answer_with_usage(vllm_server):
    client = client_for(vllm_server)
    assert client.model == "smollm2" and "smollm2" in client.describe()
    assert client.capabilities.context_window == 4096  # vLLM's /models says max_model_len
    text, deltas = collect(client, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=64))
    assert "Paris" in text and len([d for d in deltas if d.text]) > 1
    final = deltas[-1]
    assert final.finish_reason == "stop" and final.metrics.prompt_tokens > 10 and final.metrics.completion_tokens > 3
    assert final.metrics.time_to_first_token_s is not None


def test_max_tokens_and_cancel(vllm_server):
    client = client_for(vllm_server)
    final = collect(client, CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=3))[1][-1]
    assert final.finish_reason == "length" and final.metrics.completion_tokens == 3
    cancel = threading.Event()
    deltas = []
    for delta in client.stream([{"role": "user", "content": "Write a very long story."}],
                               GenerationParams(temperature=0.0, max_new_tokens=2000), cancel):
        deltas.append(delta)
        if sum(1 for d in deltas if d.text) == 3:
            cancel.set()
    assert deltas[-1].finish_reason == "cancelled"


def test_named_tool_choice_comes_back_as_a_tool_call(vllm_server):
    client = client_for(vllm_server)
    request = ToolRequest(tuple(registry.subset(["get_weather", "calculator"]).schemas()), "get_weather")
    text, deltas = collect(client, [{"role": "user", "content": "What's the weather like in Paris?"}],
                           GenerationParams(temperature=0.0, max_new_tokens=60), request)
    final = deltas[-1]
    assert text == "" and final.finish_reason == "tool_calls"
    call = final.tool_calls[0]
    assert call.name == "get_weather" and registry.validation_error(call.name, call.arguments) is None
    assert call.id  # the server's call id is kept, so the tool result answers it


def test_a_tool_round_trip_through_the_agent(vllm_server):
    client = client_for(vllm_server)
    conversation = Conversation([Message("user", "What is 17 * 23?")])
    list(run_turn(client, conversation, GenerationParams(temperature=0.0, max_new_tokens=60), "",
                  tools=ToolSettings(registry.subset(["calculator"]), choice="calculator", max_rounds=2)))
    assert [m.role for m in conversation.messages] == ["user", "assistant", "tool", "assistant"]
    call, result = conversation.messages[1].tool_calls[0], conversation.messages[2]
    assert call.name == "calculator" and result.tool_call_id == call.id
    # vLLM's server renders SmolLM2's own template, which shows no tools, so the expression is the model's guess:
    # whatever it is, the calculator answers (a result or an error observation) and the model answers after it.
    assert result.content.startswith(("Error:", call.arguments.get("expression", "").strip()))
    assert conversation.messages[3].metrics.finish_reason in ("stop", "length")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"api_base_url": "http://127.0.0.1:9/v1"}, "Cannot reach the API at http://127.0.0.1:9/v1"),
        ({"api_model": "gpt-99"}, "has no model 'gpt-99'. It offers: smollm2"),
        ({"api_base_url": "localhost:8000"}, "must start with http:// or https://"),
    ],
)
def test_errors_are_actionable(vllm_server, overrides, message):
    with pytest.raises(ClientError, match=message):
        client_for(overrides.pop("api_base_url", vllm_server), **overrides)


def test_a_bad_request_is_reported(vllm_server):
    client = client_for(vllm_server)
    with pytest.raises(ClientError, match="HTTP 400"):
        collect(client, [{"role": "user", "content": "hi " * 5000}], GenerationParams(max_new_tokens=10))


def test_a_json_schema_response_format_goes_to_the_server(vllm_server):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    text, deltas = collect(client_for(vllm_server), CAPITAL, GenerationParams(temperature=0.0, max_new_tokens=40),
                           response_format=ResponseFormat("json_schema", schema, name="capital"))
    assert deltas[-1].finish_reason == "stop" and isinstance(json.loads(text)["city"], str)
