"""llama.cpp out of the app's process: a native crash of its runner (SIGSEGV, SIGKILL as the OOM killer sends it,
SIGILL) mid-answer is a clear error for the replies in flight, the app goes on, and the next reply starts the engine
again and says so; a damaged GGUF is refused naming the file. Through the real runner process on the embedded GGUF,
and through `python -m app.frontends.api` on 127.0.0.1 (what `make serve` runs, with no backend named)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.clients.client_protocol import ClientError, GenerationParams
from app.config import ModelSettings
from harness.local_http import free_port
from harness.processes import server_process
from tests.helpers import ARTIFACTS, ROOT, collect, require_llama_cpp

LONG = GenerationParams(temperature=0.0, max_new_tokens=3000, ignore_eos=True)
SHORT = GenerationParams(temperature=0.0, max_new_tokens=8)
STORY = [{"role": "user", "content": "Tell me a long story about a lighthouse."}]


@pytest.fixture()
def own_client(gguf_client):
    """A client of its own (the shared one's engine must not be killed under the other tests)."""
    from app.clients.llamacpp.llamacpp_client import LlamaCppClient

    client = LlamaCppClient(ModelSettings(backend="llamacpp", max_context_tokens=4096, prompt_cache_mb=64))
    yield client
    client.close()


def stream_until_killed(client, sig: int) -> tuple[list[str], BaseException | None]:
    """Stream a long answer, send the runner `sig` after a few pieces of text; the pieces and what was raised."""
    pieces: list[str] = []
    try:
        for delta in client.stream(STORY, LONG, threading.Event()):
            if delta.text:
                pieces.append(delta.text)
                if len(pieces) == 5:
                    client.engine.kill(sig)
    except ClientError as exc:
        return pieces, exc
    return pieces, None


@pytest.mark.parametrize("sig, words", [
    (signal.SIGSEGV, "segmentation fault (SIGSEGV)"),
    (signal.SIGKILL, "out of memory"),
    (signal.SIGILL, "instruction this CPU cannot run"),
])
def test_a_crash_mid_answer_is_an_error_and_the_next_answer_restarts_the_engine(own_client, sig, words):
    first_pid = own_client.engine.pid
    pieces, error = stream_until_killed(own_client, sig)
    assert len(pieces) >= 5 and error is not None, "the answer did not end with an error"
    assert words in str(error) and "next message starts the engine again" in str(error), str(error)
    assert own_client.activity().generating == 0 and own_client.activity().waiting == 0

    started = time.monotonic()
    text, deltas = collect(own_client, STORY, SHORT)
    restarted_in = time.monotonic() - started
    notices = [d.notice for d in deltas if d.notice]
    assert text and deltas[-1].finish_reason == "length"
    assert any("had stopped" in n and "started again" in n for n in notices), notices
    assert own_client.engine.pid != first_pid and own_client.engine.restarts == 1
    assert restarted_in < 60
    assert "restarted 1×" in own_client.describe()
    # And then it is just running again: no notice.
    assert not [d.notice for d in collect(own_client, STORY, SHORT)[1] if d.notice]


def test_a_crash_fails_every_reply_in_flight_and_the_queued_ones(own_client):
    """Two sessions: one answering, one waiting its turn on the context. Both end with the error."""
    errors: list[BaseException] = []
    started = threading.Event()

    def second() -> None:
        started.wait(60)
        try:
            collect(own_client, STORY, LONG)
        except ClientError as exc:
            errors.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    pieces: list[str] = []
    try:
        for delta in own_client.stream(STORY, LONG, threading.Event()):
            pieces.append(delta.text)
            if len(pieces) == 3:
                started.set()
            if own_client.activity().waiting == 1 and len(pieces) > 3:
                own_client.engine.kill(signal.SIGSEGV)
    except ClientError as exc:
        errors.append(exc)
    thread.join(60)
    assert len(errors) == 2 and all("SIGSEGV" in str(e) for e in errors), errors
    assert collect(own_client, STORY, SHORT)[0]


def test_stop_reaches_the_runner_and_the_context_serves_the_next_reply(own_client):
    cancel = threading.Event()
    pieces = 0
    for delta in own_client.stream(STORY, LONG, cancel):
        pieces += bool(delta.text)
        if pieces == 3:
            cancel.set()
    assert pieces < 40
    text, deltas = collect(own_client, STORY, SHORT)
    assert text and deltas[-1].metrics.completion_tokens == 8


# ----- damaged files ---------------------------------------------------------------------------------------------

def _embedded_gguf() -> Path:
    from app.clients.embedded_model import gguf_path

    return gguf_path()


def truncated(tmp_path: Path) -> Path:
    path = tmp_path / "truncated.gguf"
    with _embedded_gguf().open("rb") as source:
        path.write_bytes(source.read(3 * 2**20))
    return path


def _damaged_copy(tmp_path: Path, name: str, offset: int, data: bytes) -> Path:
    path = tmp_path / name
    shutil.copy(_embedded_gguf(), path)
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)
    return path


def huge_tensor_count(tmp_path: Path) -> Path:
    """GGUF's header: magic, version (u32), tensor count (u64), metadata count (u64); the count says 2^62."""
    return _damaged_copy(tmp_path, "tensor-count.gguf", 8, struct.pack("<Q", 2**62))


def scrambled_metadata(tmp_path: Path) -> Path:
    """Random bytes over the metadata after the header: key lengths and types that make no sense."""
    return _damaged_copy(tmp_path, "scrambled.gguf", 24, os.urandom(4096))


@pytest.mark.parametrize("damage", [truncated, huge_tensor_count, scrambled_metadata])
def test_a_damaged_gguf_is_refused_naming_the_file(gguf_client, tmp_path, damage):
    from app.clients.llamacpp.llamacpp_client import LlamaCppClient

    path = damage(tmp_path)
    with pytest.raises(ClientError) as refused:
        LlamaCppClient(ModelSettings(backend="llamacpp", model_path=str(path)))
    assert path.name in str(refused.value) and "llama.cpp could not load" in str(refused.value)
    assert collect(gguf_client, STORY, SHORT)[0]  # and the engines already loaded go on


# ----- through the API server --------------------------------------------------------------------------------------

def _runner_pids(server_pid: int) -> list[int]:
    import psutil

    return [child.pid for child in psutil.Process(server_pid).children(recursive=True)
            if "app.clients.llamacpp.runner" in " ".join(child.cmdline())]


def test_the_api_server_survives_a_crash_and_answers_again(gguf_client, tmp_path):
    """`python -m app.frontends.api` with no backend named: llama.cpp on the embedded GGUF. SIGSEGV to its runner while
    a stream runs: that stream ends with an error event, /health stays up, the next request answers within 60 s."""
    require_llama_cpp()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("DEMO_BACKEND", "DEMO_MODEL")}
    command = [sys.executable, "-m", "app.frontends.api", "--port", str(port)]
    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=ARTIFACTS / "api-server-llamacpp-crash.log",
                        start_timeout_s=180, lifetime_s=600) as process:
        model = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        assert model == "SmolLM2-135M-Instruct", model  # the embedded model's one name, on every engine
        events: list[dict] = []
        error_event = None
        with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=120, json={
                "model": model, "messages": STORY, "max_tokens": 3000, "stream": True, "ignore_eos": True,
                "temperature": 0}) as response:
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    error_event = event["error"]
                    continue
                events.append(event)
                if len(events) == 5:
                    pids = _runner_pids(process.pid)
                    assert len(pids) == 1, pids
                    os.kill(pids[0], signal.SIGSEGV)
                    health = httpx.get(f"{base}/health", timeout=10)
                    assert health.status_code == 200
        assert error_event is not None and "SIGSEGV" in error_event["message"], error_event
        assert process.poll() is None and httpx.get(f"{base}/health", timeout=10).status_code == 200
        started = time.monotonic()
        reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
            "model": model, "messages": STORY, "max_tokens": 8, "temperature": 0})
        took = time.monotonic() - started
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"], reply.text
        print(f"\nafter SIGSEGV mid-stream: the next request answered in {took:.1f} s (engine restart included)")
        assert took < 60


# ----- the tools' schemas read before the first turn ---------------------------------------------------------------

def test_a_warmed_beginning_leaves_the_first_tools_turn_only_the_users_words(own_client):
    """The Tools page warms its system prompt and tools' schemas when it loads (app.agent.loop.warm_turn): the first
    turn then takes all of them from the cache, and reads only the user's message."""
    from app.agent.loop import ToolSettings, warm_turn
    from app.tools import load_tools

    tools = ToolSettings(load_tools())
    warm_turn(own_client, SHORT, "You are a helpful assistant.", tools)
    deadline = time.monotonic() + 120
    while not own_client.engine.warmed_tokens:
        assert time.monotonic() < deadline, "the warm-up did not end"
        time.sleep(0.05)
    warmed = own_client.engine.warmed_tokens
    assert warmed > 300  # the schemas of the app's tools
    warm_turn(own_client, SHORT, "You are a helpful assistant.", tools)  # once per beginning: nothing new to read
    _, deltas = collect(own_client, [{"role": "system", "content": "You are a helpful assistant."},
                                     {"role": "user", "content": "What time is it in Tokyo?"}], SHORT, tools.request(0))
    metrics = deltas[-1].metrics
    assert metrics.cached_tokens == warmed and metrics.prompt_tokens - warmed < 30, metrics


def test_a_reply_that_comes_during_a_warm_up_goes_first(own_client):
    from app.clients.client_protocol import ToolRequest
    from bench.peer_speed import tool_schemas

    system = [{"role": "system", "content": "Be brief."}]
    own_client.warm(system, SHORT, ToolRequest(tuple(tool_schemas())))
    started = time.monotonic()
    text, deltas = collect(own_client, STORY, SHORT)
    assert text and time.monotonic() - started < 10  # not behind the whole warm-up's reading
