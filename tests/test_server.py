"""Our OpenAI-compatible server on 127.0.0.1, driven by the official `openai` SDK (sync and async)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import openai
import pytest

from app.clients.openai import OpenAIClient
from app.config import ModelSettings
from app.server import create_app
from app.tools import load_tools
from tests.local_http import serving

registry = load_tools()
WEATHER = registry.subset(["get_weather", "calculator"]).schemas()
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def api(smol_client):
    with serving(create_app(client=smol_client, api_key="secret-key")) as base:
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
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].index == 0 and calls[0].function.name == "calculator"
    assert json.loads(calls[0].function.arguments)["expression"].replace(" ", "") == "17*23"
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
        ({"response_format": {"type": "json_object"}}, openai.BadRequestError, 400),
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
                      content=b"x" * (5 * 1024 * 1024))
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
    from app.clients.base import GenerationParams

    client = OpenAIClient(ModelSettings(backend="openai", api_base_url=f"{api}/v1", api_key="secret-key"))
    assert client.model == MODEL
    deltas = list(client.stream([{"role": "user", "content": "What is the capital of France?"}],
                                GenerationParams(temperature=0.0, max_new_tokens=20), threading.Event()))
    assert "Paris" in "".join(d.text for d in deltas) and deltas[-1].metrics.completion_tokens > 0
