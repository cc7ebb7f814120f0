"""The OpenAI-compatible backend against real OpenAI-compatible servers on 127.0.0.1: vLLM's own (serving the
embedded SmolLM2), and ours (app/frontends/api, serving a tiny model) with every request's JSON body recorded."""

from __future__ import annotations

import json
import shutil
import threading
import time
from contextlib import closing

import pytest

from app.agent.loop import TextDelta, ToolSettings, run_turn
from app.clients.client_protocol import ClientError, GenerationParams, ResponseFormat, ToolRequest
from app.clients.openai import OpenAIClient
from app.config import ModelSettings, ServerSettings
from app.domain.conversation import AnswerMetrics, Conversation, Message
from app.domain.generation_params import SAMPLING_FIELDS
from app.frontends.api.server_app import create_app
from app.tools import load_tools
from harness.local_http import serving
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
    final = deltas[-1]
    assert final.finish_reason == "cancelled"
    # The usage chunk never came: the streamed chunks were counted (vLLM sends one token per chunk).
    assert final.metrics.completion_tokens >= 3 and final.metrics.time_to_first_token_s is not None
    assert "prompt 0 tokens" not in final.metrics.summary()


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


# ----- our own server (app/frontends/api) on a tiny model whose generation_config.json states its sampling
# ---------------

MODEL_SAMPLING = {"temperature": 0.3, "top_p": 0.85, "top_k": 20, "repetition_penalty": 1.05}


class RecordingClient:
    """The server's client, noting the settings each generation ran with."""

    def __init__(self, client):
        self.client, self.params = client, []

    def stream(self, messages, params, *args, **kwargs):
        self.params.append(params)
        return self.client.stream(messages, params, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.fixture(scope="module")
def our_server(tiny_model_dir, tmp_path_factory):
    """app/frontends/api on 127.0.0.1 serving a copy of the tiny model with MODEL_SAMPLING in its
    generation_config.json; yields (base URL, the chat completion request bodies as received, the RecordingClient)."""
    from app.clients.hf.hf_client import HFClient

    folder = shutil.copytree(tiny_model_dir, tmp_path_factory.mktemp("sampling") / "tiny")
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, **MODEL_SAMPLING, "do_sample": True}))
    engine = RecordingClient(HFClient(ModelSettings(dtype="float32", model_path=str(folder), device="cpu")))
    assert engine.generation_defaults.values == MODEL_SAMPLING  # the server's defaults: the model's own
    app = create_app(ServerSettings(), client=engine)
    bodies: list[dict] = []

    async def recording(scope, receive, send):
        """The API app, keeping each chat completion request's JSON body as it came over the wire."""
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            return await app(scope, receive, send)
        chunks: list[bytes] = []

        async def receive_and_note():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    bodies.append(json.loads(b"".join(chunks)))
            return message

        return await app(scope, receive_and_note, send)

    with serving(recording) as base:
        yield f"{base}/v1", bodies, engine


def _sent(our_server, params):
    """Stream a short answer through the real client; the request body the server got, the settings it ran with."""
    base, bodies, engine = our_server
    _, deltas = collect(client_for(base), CAPITAL, params)
    assert deltas[-1].finish_reason in ("stop", "length")
    body = bodies[-1]
    return {name: value for name, value in body.items() if name in SAMPLING_FIELDS}, engine.params[-1]


def test_sampling_fields_left_to_the_server_are_not_sent(our_server):
    chosen = {"temperature": 0.5, "top_p": 0.8, "top_k": 0, "repetition_penalty": 1.2}
    # Nothing left to the server: every field goes as chosen (top_k 0, "no cut", too) and the engine runs with it.
    sent, used = _sent(our_server, GenerationParams(**chosen, max_new_tokens=4))
    assert sent == chosen and {name: getattr(used, name) for name in SAMPLING_FIELDS} == chosen
    # Temperature and top_k left to the server: neither is in the request, and the model's own values apply.
    sent, used = _sent(our_server, GenerationParams(**chosen, max_new_tokens=4,
                                                    server_defaults=frozenset({"temperature", "top_k"})))
    assert sent == {"top_p": 0.8, "repetition_penalty": 1.2}
    assert (used.temperature, used.top_k, used.top_p, used.repetition_penalty) == (0.3, 20, 0.8, 1.2)
    # All of them: the request has no sampling field at all (no empty extra fields either).
    sent, used = _sent(our_server, GenerationParams(**chosen, max_new_tokens=4,
                                                    server_defaults=frozenset(SAMPLING_FIELDS)))
    assert sent == {} and {name: getattr(used, name) for name in SAMPLING_FIELDS} == MODEL_SAMPLING
    assert our_server[1][-1]["max_tokens"] == 4  # what is not sampling is sent as before


def test_server_defaults_are_checked():
    params = GenerationParams(server_defaults={"temperature", "top_p"})  # a set is kept frozen: still hashable
    assert params.server_defaults == frozenset({"temperature", "top_p"}) and hash(params)
    with pytest.raises(ValueError, match="server_defaults may name only.*'max_new_tokens', 'temprature'"):
        GenerationParams(server_defaults=frozenset({"temprature", "max_new_tokens", "top_k"}))
    with pytest.raises(ValueError, match="must be a set of field names"):
        GenerationParams(server_defaults="temperature")


def test_a_stopped_answer_keeps_real_metrics(our_server):
    """Stop closes the stream before the server's usage chunk: the answer still says how many tokens came, and
    how fast, as the local backends' answers do, and no "prompt 0 tokens" for a prompt size nobody told."""
    base, _, _ = our_server
    conversation = Conversation([Message("user", "Write a very long story.")])
    params = GenerationParams(temperature=0.0, max_new_tokens=3000, ignore_eos=True)
    started = time.perf_counter()
    texts = 0
    with closing(run_turn(client_for(base), conversation, params)) as events:  # as live_turn.py does
        for event in events:
            texts += isinstance(event, TextDelta)
            if texts == 3:
                break  # the user pressed Stop: Streamlit raised inside a render call, the events are closed
    answer = conversation.messages[-1]
    assert answer.role == "assistant" and answer.content and answer.stopped
    metrics = answer.metrics
    assert metrics.finish_reason == "cancelled" and metrics.prompt_tokens == 0
    assert 3 <= metrics.completion_tokens < 3000
    assert metrics.time_to_first_token_s is not None and 0 < metrics.time_to_first_token_s <= metrics.total_time_s
    assert metrics.total_time_s <= time.perf_counter() - started
    summary = metrics.summary()
    assert summary.startswith(f"{metrics.completion_tokens} tokens · TTFT ") and "prompt" not in summary
    assert metrics.tokens_per_second is not None and "tok/s" in summary  # three deltas: three moments


def test_the_summary_leaves_out_an_unknown_prompt_size():
    assert AnswerMetrics(completion_tokens=3).summary() == "3 tokens"
    assert AnswerMetrics(completion_tokens=3, prompt_tokens=7).summary() == "3 tokens · prompt 7 tokens"
    # A prompt that came wholly from a cache is known: 0 read, some cached.
    assert "prompt 0 tokens · 5 cached" in AnswerMetrics(cached_tokens=5).summary()
