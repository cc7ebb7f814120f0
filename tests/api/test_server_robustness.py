"""No HTTP client can crash, stall or leak through the API server: a real `python -m app.frontends.api` process on
127.0.0.1 serving the tiny model, sent what a careless or hostile client sends. Every answer is a clear 4xx in
OpenAI's error shape (never a 5xx, never the server's internals), a client that leaves stops its generation within
a second or so, and SIGTERM ends the process promptly even while generations run."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.clients.client_protocol import Delta
from app.config import ServerSettings
from app.frontends.api.middleware import max_body_bytes
from app.frontends.api.server_app import create_app
from harness.local_http import free_port, serving
from harness.processes import server_process
from tests.helpers import ARTIFACTS, ROOT

KEY = "robust-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ORIGIN = "http://app.example"
HELLO = [{"role": "user", "content": "hi"}]
# Long enough that a generation is still running whenever a test leaves it: the tiny model never stops by itself
# (its special tokens are suppressed), and 3,500 tokens take tens of seconds on a CPU.
LONG = {"model": "tiny", "max_tokens": 3500, "temperature": 0,
        "messages": [{"role": "user", "content": "Tell me a long story."}]}
# What an error body must never show: tracebacks, source files, pydantic's echo of the input and its links.
INTERNALS = ("Traceback", 'File "', ".py", ".cc:", "/work", "site-packages", "'input'", "'ctx'", "pydantic.dev",
             "errors.")


@contextmanager
def api_server(model_dir: Path, name: str) -> Iterator[tuple[str, object]]:
    """`python -m app.frontends.api` on the tiny model with an API key and a CORS origin; yields its URL and process."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEMO_DEVICE": "cpu"}
    command = [sys.executable, "-m", "app.frontends.api", "--model", str(model_dir), "--served-model-name", "tiny",
               "--port", str(port), "--api-key", KEY, "--cors-origins", ORIGIN]
    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=ARTIFACTS / f"{name}.log",
                        start_timeout_s=120, lifetime_s=900) as process:
        yield base, process


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[str]:
    with api_server(tiny_model_dir, "api-server-robustness") as (base, _):
        yield base


def chat(base: str, body: object, timeout: float = 120) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=timeout)


def metric(base: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def in_flight(base: str) -> float:
    return metric(base, "demo_chat_requests_in_progress")


def wait_for(condition, timeout_s: float, what: str) -> float:
    """Seconds until `condition()` held, polled every 20 ms; fails after `timeout_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"{what}: not after {timeout_s} s"
        time.sleep(0.02)
    return time.monotonic() - started


def assert_clear_error(response: httpx.Response, status: int | tuple[int, ...], *words: str) -> str:
    """An OpenAI-shaped error with this status, naming `words`, and showing nothing of the server's internals."""
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert not [marker for marker in INTERNALS if marker in response.text], response.text[:500]
    for word in words:
        assert word in error["message"], error["message"]
    return error["message"]


def answers_normally(base: str) -> None:
    reply = chat(base, {"model": "tiny", "max_tokens": 3, "messages": HELLO})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3


# ----- 1. size: refused before any model work ------------------------------------------------------------------

def test_ten_thousand_messages_are_refused_at_once_with_413(server):
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"short message number {i}"} for i in range(10_000)]
    started = time.monotonic()
    reply = chat(server, {"model": "tiny", "max_tokens": 1, "messages": messages})
    assert time.monotonic() - started < 5  # it held the model for ~11 minutes before
    assert_clear_error(reply, 413, "10000 messages", "at most 2000")
    assert reply.json()["error"]["param"] == "messages"
    answers_normally(server)


def test_too_many_characters_are_refused_with_413(server):
    messages = [{"role": "user", "content": "word " * 110_000}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "word " * 110_000}]  # 1.1 M characters, in a 1.1 MB body
    assert_clear_error(chat(server, {"model": "tiny", "max_tokens": 1, "messages": messages}), 413,
                       "characters of text", "at most 1000000")


def test_two_thousand_messages_are_fitted_to_the_context_quickly(server):
    """At the limit, fitting takes a fraction of a second (0.08 s; counting once per dropped turn took 21 s)."""
    messages = [{"role": ("user", "assistant")[i % 2], "content": f"short message number {i}"} for i in range(1999)]
    started = time.monotonic()
    reply = chat(server, {"model": "tiny", "max_tokens": 1, "messages": messages})
    assert reply.status_code == 200, reply.text
    assert time.monotonic() - started < 10
    assert 3000 < reply.json()["usage"]["prompt_tokens"] < 4096  # the newest turns, as many as fit


def test_a_chunked_body_over_the_limit_is_413(server):
    limit = max_body_bytes()  # 4 MB of text and one message's worth of images (DEMO_IMAGE_MAX_MESSAGE_MB)

    def chunks():
        for _ in range(limit // 2**20 + 1):
            yield b" " * 2**20

    reply = httpx.post(f"{server}/v1/chat/completions", content=chunks(), timeout=60,
                       headers={**AUTH, "Content-Type": "application/json"})
    assert_clear_error(reply, 413, f"larger than {limit} bytes")


# ----- 2. a client that leaves stops its generation -------------------------------------------------------------

def _leave_a_stream(base: str) -> None:
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**LONG, "stream": True}, headers=AUTH,
                      timeout=60) as response:
        lines = response.iter_lines()  # kept: a dropped iterator would close the connection at once
        assert next(line for line in lines if line.startswith("data: ")).startswith('data: {"id"')
        wait_for(lambda: in_flight(base) == 1, 10, "the generation did not start")


def _leave_a_whole_answer(base: str) -> None:
    """A raw request on a socket closed while the answer is being generated: exactly what a client that gives up
    (a timeout, a killed process) does."""
    address = urlsplit(base)
    body = json.dumps(LONG).encode()
    with socket.create_connection((address.hostname, address.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        wait_for(lambda: in_flight(base) == 1, 10, "the generation did not start")


@pytest.mark.parametrize("leave", [_leave_a_stream, _leave_a_whole_answer], ids=["stream", "non-stream"])
def test_a_client_that_leaves_stops_its_generation_within_a_second(server, leave):
    cancelled = metric(server, "demo_chat_completions_total", finish_reason="cancelled")
    leave(server)  # returns once the connection is closed
    stopped_after = wait_for(lambda: in_flight(server) == 0, 3, "the generation went on after the client left")
    print(f"\n{leave.__name__}: generation stopped {stopped_after:.2f} s after the client left")
    assert stopped_after < 1.5
    wait_for(lambda: metric(server, "demo_chat_completions_total", finish_reason="cancelled") == cancelled + 1, 3,
             "the answer was not counted as cancelled")
    answers_normally(server)


def test_sigterm_ends_the_server_promptly_while_generations_run(tiny_model_dir):
    with api_server(tiny_model_dir, "api-server-sigterm") as (base, process):
        def whole() -> None:
            try:
                chat(base, LONG, timeout=60)
            except httpx.HTTPError:
                pass  # the server went away: what this test does

        def streamed() -> None:
            try:
                with httpx.stream("POST", f"{base}/v1/chat/completions", json={**LONG, "stream": True},
                                  headers=AUTH, timeout=60) as response:
                    for _ in response.iter_lines():
                        pass
            except httpx.HTTPError:
                pass

        for target in (whole, streamed):
            threading.Thread(target=target, daemon=True).start()
        wait_for(lambda: in_flight(base) == 2, 20, "the two generations did not start")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        exited_after = time.monotonic() - started
    print(f"\nSIGTERM with two generations running: the server exited after {exited_after:.2f} s")
    assert exited_after < 6  # the 2 s graceful shutdown timeout, then the generations are cancelled


# ----- 3. requests that were 500s ---------------------------------------------------------------------------------

def _forced(parameters: object) -> dict:
    return {"model": "tiny", "max_tokens": 4, "messages": HELLO, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "run", "parameters": parameters}}]}


@pytest.mark.parametrize("parameters, words", [
    ("a string", ["valid dictionary"]),
    (["a", "list"], ["valid dictionary"]),
    (True, ["valid dictionary"]),
    ({"type": "object", "properties": {"code": "string"}}, ["not a valid JSON Schema", "properties.code"]),
    ({"type": "object", "properties": ["code"]}, ["not a valid JSON Schema", "properties"]),
    ({"type": "object", "properties": {"code": True}}, ["properties.code must be a JSON Schema object"]),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"}, ["not a valid JSON Schema"]),
])
def test_tool_parameters_that_are_not_a_json_schema_are_422(server, parameters, words):
    reply = chat(server, _forced(parameters))
    assert_clear_error(reply, 422, "tools.0.function.parameters", *words)


def test_a_valid_schema_the_grammar_cannot_enforce_is_400(server):
    parameters = {"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2}}}
    message = assert_clear_error(chat(server, _forced(parameters)), 400, "cannot be enforced",
                                 "minLength 5 is greater than maxLength 2")
    assert "/project" not in message and ".cc:" not in message  # xgrammar's own source file, logged in C++


def test_schemas_nested_too_deeply_for_a_grammar_are_refused_at_once(server):
    deep = _nested({"type": "object"}, "properties", 100)
    started = time.monotonic()
    assert_clear_error(chat(server, _forced(deep)), 422, "nests more than 128 objects and arrays")
    response_format = {"type": "json_schema", "json_schema": {"name": "deep", "schema": deep}}
    assert_clear_error(chat(server, {"model": "tiny", "max_tokens": 2, "messages": HELLO,
                                     "response_format": response_format}), 400, "response_format.json_schema.schema")
    assert time.monotonic() - started < 3  # 400 levels took 10 s of grammar compiling


@pytest.mark.parametrize("seed", [2**70, -(2**70), 2**63])
def test_a_seed_out_of_range_is_422(server, seed):
    assert_clear_error(chat(server, {"model": "tiny", "max_tokens": 2, "messages": HELLO, "seed": seed}), 422,
                       "seed")


def test_the_largest_seeds_generate(server):
    for seed in (2**63 - 1, -(2**63)):
        assert chat(server, {"model": "tiny", "max_tokens": 2, "messages": HELLO, "seed": seed}).status_code == 200


@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 1e-6])
def test_the_tiniest_temperatures_decode_greedily(server, temperature):
    # Dividing the logits by 1e-40 overflowed float32 and made every probability NaN: "Prefill failed".
    def answer(value: float) -> str:
        response = chat(server, {"model": "tiny", "max_tokens": 6, "messages": HELLO, "temperature": value})
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]["content"]

    assert answer(temperature) == answer(0.0)


def test_deeply_nested_tool_call_arguments_are_400(server):
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "[" * 100_000}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"}]
    assert_clear_error(chat(server, {"model": "tiny", "max_tokens": 2, "messages": messages}), 400,
                       "Invalid messages")


# ----- 4. CORS, error bodies ------------------------------------------------------------------------------------

def test_a_cors_preflight_is_answered_before_the_key_is_asked_for(server):
    preflight = httpx.options(f"{server}/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    # A request without the key is still refused, with CORS headers so the page can read why.
    refused = httpx.post(f"{server}/v1/chat/completions", json={"model": "tiny", "messages": HELLO},
                         headers={"Origin": ORIGIN})
    assert_clear_error(refused, 401, "API key")
    assert refused.headers["access-control-allow-origin"] == ORIGIN


@pytest.mark.parametrize("content, words", [
    (b"{nope", ["not valid JSON", "at character 1"]),
    (b'["a", "list"]', ["must be a JSON object"]),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}',
     ["temperature", "valid number"]),
    (b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}',
     ["max_tokens", "greater than or equal to 1"]),
])
def test_error_bodies_are_clear_and_show_no_internals(server, content, words):
    reply = httpx.post(f"{server}/v1/chat/completions", content=content,
                       headers={**AUTH, "Content-Type": "application/json"})
    assert_clear_error(reply, 422, *words)


def test_unknown_routes_and_methods_answer_in_openai_shape(server):
    assert_clear_error(httpx.get(f"{server}/v1/nothing-here", headers=AUTH), 404)
    assert_clear_error(httpx.get(f"{server}/v1/chat/completions", headers=AUTH), 405)


# ----- 5. a batch of weird bodies: never a 5xx, and the server answers afterwards ------------------------------

def _weird_bodies() -> list[tuple[str, bytes]]:
    # max_completion_tokens wins over max_tokens: a huge but valid max_tokens is checked without a long answer.
    ok = {"model": "tiny", "max_tokens": 2, "max_completion_tokens": 2, "messages": HELLO}
    values = [None, True, -1, 0, 10**30, 1e308, "", "x" * 10_000, "\x00", [], {}, [[[[]]]], {"a": {"b": {}}}]
    bodies = [(f"{field}={value!r:.20}", json.dumps({**ok, field: value}).encode())
              for field in ["model", "messages", "tools", "tool_choice", "response_format", "temperature", "top_p",
                            "top_k", "max_tokens", "stop", "seed", "stream", "stream_options", "n", "logprobs",
                            "frequency_penalty", "user"]
              for value in values]
    message_values = [{"role": "user", "content": value} for value in values] + [
        {"role": value, "content": "hi"} for value in values] + [
        {"role": "assistant", "tool_calls": value} for value in values] + [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": value, "arguments": value}}]}
        for value in values] + [
        {"role": "user", "content": [{"type": "text", "text": value}]} for value in values] + [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "tool", "content": "a result nobody asked for"},
        {"role": "user", "content": "null \x00 byte and lone surrogate \ud800"},
    ]
    bodies += [(f"message {i}", json.dumps({**ok, "messages": [message]}).encode())
               for i, message in enumerate(message_values)]
    bodies += [
        ("empty", b""),
        ("not json", b"model=tiny&messages=hi"),
        ("invalid utf-8", b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe\xc3"}]}'),
        ("null bytes", b'{"model": "tiny\x00", "messages": [{"role": "user", "content": "hi"}]}'),
        ("nested arrays", b"[" * 100_000 + b"]" * 100_000),
        ("nested objects", b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
        ("nested in messages", b'{"model": "tiny", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
        ("huge integer", b'{"model": "tiny", "max_tokens": 1' + b"0" * 5000 + b', "messages": []}'),
        ("huge float", b'{"model": "tiny", "temperature": 1e999, "messages": [{"role": "user", "content": "hi"}]}'),
        ("NaN", b'{"model": "tiny", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}'),
        ("duplicate keys", b'{"model": "x", "model": "tiny", "max_tokens": 2, "messages": []}'),
        ("10k messages", json.dumps({**ok, "messages": HELLO * 10_000}).encode()),
        ("10k tools", json.dumps({**ok, "tools": [{"type": "function", "function": {"name": f"f{i}"}}
                                                  for i in range(10_000)]}).encode()),
        ("deep schema", json.dumps({**ok, "tool_choice": "required", "tools": [{"type": "function", "function": {
            "name": "f", "parameters": _nested({"type": "object"}, "properties", 400)}}]}).encode()),
        ("deep response format", json.dumps({**ok, "response_format": {"type": "json_schema", "json_schema": {
            "name": "r", "schema": _nested({"type": "object"}, "properties", 400)}}}).encode()),
    ]
    return bodies


def _nested(leaf: dict, key: str, depth: int) -> dict:
    value = leaf
    for _ in range(depth):
        value = {"type": "object", key: {"p": value}}
    return value


def test_weird_bodies_never_get_a_server_error(server):
    failures = []
    for name, content in _weird_bodies():
        reply = httpx.post(f"{server}/v1/chat/completions", content=content, timeout=120,
                           headers={**AUTH, "Content-Type": "application/json"})
        if reply.status_code >= 500 or (reply.status_code >= 400 and [m for m in INTERNALS if m in reply.text]):
            failures.append((name, reply.status_code, reply.text[:300]))
    assert not failures, failures
    assert metric(server, "demo_http_requests_total", route="/v1/chat/completions", status="500") == 0
    answers_normally(server)


def test_an_unexpected_failure_is_a_500_in_openai_shape_without_its_details(tiny_client, monkeypatch):
    """A bug is still a 500 (the server's fault), but the client learns nothing of the server's code from it."""
    def fails_at_once(*args, **kwargs):
        raise RuntimeError("secret detail of /srv/app/internal.py")
        yield  # a generator, like every client's stream

    def fails_midway(*args, **kwargs):
        yield Delta(text="Hello")
        raise RuntimeError("secret detail of /srv/app/internal.py")

    body = {"model": "tiny", "max_tokens": 4, "messages": HELLO}
    with serving(create_app(ServerSettings(served_name="tiny"), client=tiny_client)) as base:
        monkeypatch.setattr(tiny_client, "stream", fails_at_once)
        whole = httpx.post(f"{base}/v1/chat/completions", json=body)
        monkeypatch.setattr(tiny_client, "stream", fails_midway)
        streamed = httpx.post(f"{base}/v1/chat/completions", json={**body, "stream": True})
    assert whole.status_code == 500 and whole.json()["error"]["type"] == "server_error"
    assert streamed.status_code == 200 and '"content":"Hello"' in streamed.text
    assert '"error": {"message": "Generating the answer failed."' in streamed.text and "[DONE]" not in streamed.text
    assert "secret" not in whole.text + streamed.text
