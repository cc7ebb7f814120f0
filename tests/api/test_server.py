"""Our OpenAI-compatible server on 127.0.0.1, driven by the official `openai` SDK (sync and async)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import jsonschema
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from app.clients.client_protocol import GenerationParams, ToolRequest
from app.clients.openai import OpenAIClient
from app.config import ModelSettings, ServerSettings
from app.frontends.api.middleware import max_body_bytes
from app.frontends.api.server_app import create_app
from app.tools import load_tools
from harness.local_http import serving
from tests.helpers import collect

registry = load_tools()
WEATHER = registry.subset(["get_weather", "calculator"]).schemas()
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def api(smol_client):
    with serving(create_app(ServerSettings(api_key="secret-key"), client=smol_client)) as base:
        yield base


@pytest.fixture
def sdk(api):
    return openai.OpenAI(base_url=f"{api}/v1", api_key="secret-key", max_retries=0)


def test_health_and_models(api, sdk):
    assert httpx.get(f"{api}/health").json()["status"] == "ok"
    assert [m.id for m in sdk.models.list()] == [MODEL]


def test_non_streaming_chat_with_usage(sdk):
    reply = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=40, messages=[
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}])
    assert "Paris" in reply.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 10 and reply.usage.completion_tokens > 3


def test_streaming_chat_in_openai_format(sdk):
    chunks = list(sdk.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=5, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Tell me about Paris."}]))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_validate(sdk, tool_choice):
    reply = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=60, tools=WEATHER,
                                        tool_choice=tool_choice,
                                        messages=[{"role": "user", "content": "What's the weather like in Paris?"}])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and registry.validation_error("get_weather", arguments) is None
    assert call.id.startswith("call_")


def test_streamed_tool_call_never_leaks_into_content(sdk):
    chunks = list(sdk.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=60, tools=WEATHER, stream=True,
        tool_choice={"type": "function", "function": {"name": "calculator"}},
        messages=[{"role": "user", "content": "What is 17 * 23?"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # Incremental, as OpenAI and vLLM stream them: the id and name first, then the arguments in several pieces.
    assert pieces[0].index == 0 and pieces[0].function.name == "calculator" and pieces[0].id.startswith("call_")
    assert all(p.index == 0 and p.function.name is None and p.id is None for p in pieces[1:]) and len(pieces) > 3
    arguments = "".join(p.function.arguments or "" for p in pieces)
    assert json.loads(arguments)["expression"].replace(" ", "") == "17*23"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_multi_turn_with_a_tool_result(sdk):
    messages = [
        {"role": "user", "content": "What is 17 * 23?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "calculator", "arguments": '{"expression": "17 * 23"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "17 * 23 = 391"},
    ]
    reply = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=30, tools=WEATHER, tool_choice="none",
                                        messages=messages)
    assert "391" in reply.choices[0].message.content


@pytest.mark.parametrize(
    "kwargs, error, status",
    [
        ({"model": "gpt-99"}, openai.NotFoundError, 404),
        ({"n": 2}, openai.BadRequestError, 400),
        ({"temperature": 7}, openai.UnprocessableEntityError, 422),
        ({"extra_body": {"logit_bias": {"1": 5}}}, openai.BadRequestError, 400),
        ({"response_format": {"type": "json_schema"}}, openai.BadRequestError, 400),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         openai.BadRequestError, 400),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": WEATHER},
         openai.BadRequestError, 400),
    ],
)
def test_errors_in_openai_shape(sdk, kwargs, error, status):
    request = {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], **kwargs}
    with pytest.raises(error) as raised:
        sdk.chat.completions.create(**request)
    assert raised.value.status_code == status and raised.value.body["message"]


def test_api_key_and_body_size(api):
    bad = openai.OpenAI(base_url=f"{api}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    huge = httpx.post(f"{api}/v1/chat/completions", headers={"Authorization": "Bearer secret-key"},
                      content=b"x" * (max_body_bytes() + 1))
    assert huge.status_code == 413 and "larger than" in huge.json()["error"]["message"]


def test_eight_concurrent_streams_each_get_their_own_answer(api):
    prompts = [f"Say the number {i}." for i in range(8)]

    async def one(client, prompt):
        stream = await client.chat.completions.create(model=MODEL, temperature=0, max_tokens=6, stream=True,
                                                      messages=[{"role": "user", "content": prompt}])
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def run_all():
        client = openai.AsyncOpenAI(base_url=f"{api}/v1", api_key="secret-key", max_retries=0)
        return await asyncio.gather(*(one(client, p) for p in prompts))

    together = asyncio.run(run_all())
    sdk = openai.OpenAI(base_url=f"{api}/v1", api_key="secret-key", max_retries=0)
    alone = [sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=6,
                                         messages=[{"role": "user", "content": p}]).choices[0].message.content
             for p in prompts]
    assert together == alone


def test_the_apps_openai_backend_works_against_this_server(api):
    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{api}/v1", api_key="secret-key"))
    assert client.model == MODEL and client.capabilities.context_window == 8192  # from our /v1/models
    text, deltas = collect(client, [{"role": "user", "content": "What is the capital of France?"}],
                           GenerationParams(temperature=0.0, max_new_tokens=20))
    assert "Paris" in text and deltas[-1].metrics.completion_tokens > 0
    # A forced call streams through both servers' pieces and comes back whole, with the server's id.
    request = ToolRequest(tuple(WEATHER), "get_weather")
    text, deltas = collect(client, [{"role": "user", "content": "Weather in Paris?"}],
                           GenerationParams(temperature=0.0, max_new_tokens=60), request)
    call = deltas[-1].tool_calls[0]
    pieces = [f for d in deltas for f in d.call_fragments]
    assert text == "" and call.name == "get_weather" and "city" in call.arguments and len(pieces) > 2
    assert pieces[0].id == call.id and call.id.startswith("call_")


class City(BaseModel):
    name: str
    country: str
    population: int


def test_a_json_schema_response_format_from_the_sdk_returns_content_that_validates(sdk):
    reply = sdk.chat.completions.parse(model=MODEL, temperature=0, max_tokens=60, response_format=City, messages=[
        {"role": "user", "content": "Describe Paris as JSON with its name, country and population."}])
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, City)
    jsonschema.validate(json.loads(choice.message.content), City.model_json_schema())


def test_constrained_requests_hold_while_another_answer_is_being_written(sdk):
    """A plain answer in flight, then a JSON-schema reply and a named tool_choice: they share the batch with it. Before
    the fix both came back as HTTP 400 "Generation failed: " every time (0 of 3), alone they worked."""
    writing = threading.Thread(target=lambda: sdk.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=120, messages=[{"role": "user", "content": "Write a long story."}]))
    writing.start()
    time.sleep(0.3)
    try:
        reply = sdk.chat.completions.parse(model=MODEL, temperature=0, max_tokens=60, response_format=City, messages=[
            {"role": "user", "content": "Describe Paris as JSON with its name, country and population."}])
        assert isinstance(reply.choices[0].message.parsed, City)
        call = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=60, tools=WEATHER,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                           messages=[{"role": "user", "content": "Weather in Paris?"}])
        arguments = json.loads(call.choices[0].message.tool_calls[0].function.arguments)
        assert registry.validation_error("get_weather", arguments) is None
    finally:
        writing.join(120)


def test_a_json_object_response_format_streams_a_json_object(sdk):
    chunks = list(sdk.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=80, stream=True, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Give me a JSON object describing a cat."}]))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop" and isinstance(json.loads(content), dict)


def test_the_sdk_puts_streamed_incremental_tool_calls_together(sdk):
    with sdk.chat.completions.stream(model=MODEL, temperature=0, max_tokens=60, tools=WEATHER,
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                     messages=[{"role": "user", "content": "Weather in Paris?"}]) as stream:
        pieces = [event.arguments_delta for event in stream if event.type == "tool_calls.function.arguments.delta"]
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert len(pieces) > 2 and "".join(pieces) == call.function.arguments  # arrived piece by piece
    assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_forced_call_cut_by_max_tokens_is_length_not_an_error(sdk, api):
    # 22 tokens: the call's name is written, its arguments are not finished.
    request = dict(model=MODEL, temperature=0, max_tokens=22, tools=WEATHER, tool_choice="required",
                   messages=[{"role": "user", "content": "What's the weather like in Paris?"}])
    choice = sdk.chat.completions.create(**request).choices[0]
    assert choice.finish_reason == "length"  # as OpenAI and vLLM answer: 200, with what was generated
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)  # cut: the client sees that from finish_reason "length"
    chunks = list(sdk.chat.completions.create(**request, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    pieces = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert "".join(p.function.arguments or "" for p in pieces) == call.function.arguments


def _metric(api: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{api}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_metrics_count_requests_tokens_latency_and_errors(sdk, api):
    before = {name: _metric(api, name) for name in ("demo_completion_tokens_total",
                                                    "demo_time_to_first_token_seconds_count",
                                                    "demo_chat_completion_duration_seconds_count")}
    requests = _metric(api, "demo_http_requests_total", route="/v1/chat/completions", status="200")
    not_found = _metric(api, "demo_errors_total", kind="invalid_request_error")
    reply = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=5,
                                        messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-99", max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    assert _metric(api, "demo_completion_tokens_total") == before["demo_completion_tokens_total"] + \
        reply.usage.completion_tokens
    assert _metric(api, "demo_time_to_first_token_seconds_count") == \
        before["demo_time_to_first_token_seconds_count"] + 1
    assert _metric(api, "demo_chat_completion_duration_seconds_count") == \
        before["demo_chat_completion_duration_seconds_count"] + 1
    assert _metric(api, "demo_http_requests_total", route="/v1/chat/completions", status="200") == requests + 1
    assert _metric(api, "demo_errors_total", kind="invalid_request_error") == not_found + 1


def test_ignore_eos_writes_max_tokens_as_vllm_and_llama_server_do(sdk):
    reply = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=30, extra_body={"ignore_eos": True},
                                        messages=[{"role": "user", "content": "Say hi."}])
    assert reply.usage.completion_tokens == 30 and reply.choices[0].finish_reason == "length"


def test_a_follow_up_request_reports_its_cached_prompt_tokens(sdk, api):
    """usage.prompt_tokens_details.cached_tokens, as OpenAI and vLLM report it, and the hits on /metrics."""
    hits = _metric(api, "demo_prompt_cache_lookups_total", result="hit")
    cached_total = _metric(api, "demo_prompt_cached_tokens_total")
    messages = [{"role": "system", "content": "You answer in one short sentence about geography, nothing else."},
                {"role": "user", "content": "What is the capital of Italy?"}]
    first = sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=20, messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And of Spain?"}]
    chunks = list(sdk.chat.completions.create(model=MODEL, temperature=0, max_tokens=20, messages=messages,
                                              stream=True, stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert usage.prompt_tokens - 15 <= usage.prompt_tokens_details.cached_tokens < usage.prompt_tokens
    assert _metric(api, "demo_prompt_cache_lookups_total", result="hit") >= hits + 1
    assert _metric(api, "demo_prompt_cached_tokens_total") >= cached_total + usage.prompt_tokens_details.cached_tokens


def test_metrics_show_how_many_answers_share_the_model(api):
    """Three streams at once are written together (continuous batching), and the gauge says so; it is 0 after."""
    body = {"model": MODEL, "stream": True, "max_tokens": 300, "temperature": 0,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}
    headers = {"Authorization": "Bearer secret-key"}
    with httpx.Client(timeout=60) as http:
        streams = [http.stream("POST", f"{api}/v1/chat/completions", json=body, headers=headers) for _ in range(3)]
        responses = [stream.__enter__() for stream in streams]
        try:
            for response in responses:  # each has its first token: all three are in the batch
                next(line for line in response.iter_lines() if '"content"' in line)
            assert _metric(api, "demo_model_answers_generating") == 3
            assert _metric(api, "demo_model_answers_waiting") == 0
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
    deadline = time.monotonic() + 5
    while _metric(api, "demo_model_answers_generating") != 0:
        assert time.monotonic() < deadline, "closed streams stayed in the batch"
        time.sleep(0.05)


def test_a_client_that_disconnects_cancels_its_generation(api):
    cancelled = _metric(api, "demo_chat_completions_total", finish_reason="cancelled")
    body = {"model": MODEL, "stream": True, "max_tokens": 400, "temperature": 0,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}]}
    # httpx's default 5 s can pass before the first chunk while the parallel phase loads the machine.
    with httpx.stream("POST", f"{api}/v1/chat/completions", json=body, timeout=60,
                      headers={"Authorization": "Bearer secret-key"}) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: ")).startswith('data: {"id"')
    # Only a cancelled generation is counted as one, so the wait can be generous: 400 tokens take longer here.
    deadline = time.monotonic() + 15
    while _metric(api, "demo_chat_completions_total", finish_reason="cancelled") == cancelled or \
            _metric(api, "demo_chat_requests_in_progress") != 0:  # down once the generation has stopped
        assert time.monotonic() < deadline, "the generation went on after the client left"
        time.sleep(0.05)


def test_the_command_line_overrides_the_environments_settings(monkeypatch):
    from app.frontends.api.server_app import command_line_settings

    monkeypatch.setenv("DEMO_BACKEND", "openai")
    monkeypatch.setenv("DEMO_SERVER_API_KEY", "from-env")
    monkeypatch.setenv("DEMO_SERVER_CORS_ORIGINS", " http://a.example , ,http://b.example")
    monkeypatch.setenv("DEMO_SERVER_MAX_CHARS", "500")
    settings = command_line_settings(["--model", "/models/m", "--served-model-name", "m", "--port", "9000",
                                      "--max-messages", "7"])
    assert (settings.model.backend, settings.model.model_path, settings.served_name) == ("openai", "/models/m", "m")
    assert (settings.port, settings.api_key, settings.cors_origins) == (9000, "from-env", ("http://a.example",
                                                                                           "http://b.example"))
    assert (settings.limits.max_messages, settings.limits.max_chars) == (7, 500)
    given = command_line_settings(["--api-key", "given", "--cors-origins", ""])
    assert (given.api_key, given.cors_origins) == ("given", ())


def test_the_key_comes_from_a_file_and_a_command_line_key_is_warned_about(tmp_path, capsys):
    """A key on the command line is readable by every user of the machine (ps): it still works, as vLLM's flag
    does, with a warning; a key file is read instead, and an empty one is refused saying so."""
    from app.frontends.api.server_app import command_line_settings

    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    key_file.chmod(0o600)
    assert command_line_settings(["--api-key-file", str(key_file)]).api_key == "from-file"
    assert "Warning" not in capsys.readouterr().err
    assert command_line_settings(["--api-key", "given"]).api_key == "given"
    assert "shows the key to every user" in capsys.readouterr().err
    key_file.write_text("")
    with pytest.raises(SystemExit):
        command_line_settings(["--api-key-file", str(key_file)])
    assert "is empty" in capsys.readouterr().err


def wait_for_health(base: str) -> dict:
    for _ in range(600):
        body = httpx.get(f"{base}/health").json()
        if body["status"] != "loading":
            return body
        time.sleep(0.1)
    raise AssertionError("the model did not load in a minute")


def test_a_server_loads_its_model_in_the_background_under_its_folders_name(tiny_model_dir, tmp_path):
    """Without a loaded client, the server loads its model on a thread (into its pool): /health answers meanwhile,
    then names the model by its folder (as spelled: a link's name, not its target's); a missing folder is an error
    that /health and every request report, the server staying up."""
    link = tmp_path / "served-link"
    link.symlink_to(tiny_model_dir, target_is_directory=True)
    settings = ServerSettings(model=ModelSettings(model_path=str(link), device="cpu", dtype="float32"))
    with serving(create_app(settings)) as base:
        assert wait_for_health(base) == {"status": "ok", "model": "served-link", "error": None}
        assert [m["id"] for m in httpx.get(f"{base}/v1/models").json()["data"]] == ["served-link"]
    missing = ServerSettings(model=ModelSettings(model_path=str(tmp_path / "missing")))
    with serving(create_app(missing)) as base:
        body = wait_for_health(base)
        assert body["status"] == "error" and "does not exist" in body["error"]
        answer = httpx.get(f"{base}/v1/models")
        assert answer.status_code == 503 and "does not exist" in answer.json()["error"]["message"]
