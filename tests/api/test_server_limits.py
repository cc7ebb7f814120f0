"""What a hostile client's schema or connection can cost the API server (issue 23, findings 6 and 7): schemas too
large to build a grammar from are refused at once, a grammar that compiles too long is refused at its time limit,
/health answers meanwhile, and a connection whose request never arrives whole is closed."""

from __future__ import annotations

import os
import random
import socket
import string
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.clients.hf.grammar_compile import DeadlineCompiler, GrammarTooSlow
from app.config import ServerSettings
from app.frontends.api.server_app import create_app
from harness.local_http import free_port, serving
from harness.processes import server_process
from tests.api.test_server_robustness import AUTH, HELLO, KEY, api_server, assert_clear_error, chat
from tests.helpers import ARTIFACTS, ROOT

_RANDOM = random.Random(23)


def _words(count: int) -> list[str]:
    return ["".join(_RANDOM.choice(string.ascii_lowercase) for _ in range(10)) for _ in range(count)]


def _object_with(schema: dict) -> dict:
    return {"type": "object", "properties": {"x": schema}, "required": ["x"]}


def _alternatives(count: int) -> dict:
    return {"anyOf": [{"type": "object", "properties": {f"k{i}_{j}": {"type": "string"} for j in range(5)},
                       "required": [f"k{i}_0"]} for i in range(count)]}


# What took 67-168 s to answer before (and the 640 KB of alternatives stalled /health: validating it against the
# meta-schema ran on the event loop for 8 s).
PATHOLOGICAL = {
    "enum": (_object_with({"enum": _words(100_000)}), "more than 1000 enum and const values"),
    "anyOf": (_alternatives(3000), "more than 2000 values"),
    "pattern": (_object_with({"type": "string", "pattern": "(ab|cd|[a-z]{2,5})" * 100}), "longer than 300"),
    "repeat": (_object_with({"type": "string", "pattern": "a{1,50000}"}), "more than 100 times"),
    "length": (_object_with({"type": "string", "maxLength": 100_000}), "maxLength in the JSON Schema is over"),
}


class HealthWatch:
    """Polls /health on a thread while a test runs; `worst` is the slowest answer in seconds, `answers` counts the
    answers. It answers before the work starts and once more after it ends: a refusal can take less time than the
    thread's first request (CI once saw no answer at all in 0.09 s)."""

    def __init__(self, base: str) -> None:
        self.base, self.worst, self.answers = base, 0.0, 0
        self._stop, self._polling = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=30) as http:
            while True:
                last = self._stop.is_set()  # one more answer after the work, however quick the work was
                started = time.monotonic()
                http.get(f"{self.base}/health")
                self.worst = max(self.worst, time.monotonic() - started)
                self.answers += 1
                self._polling.set()
                if last:
                    return
                self._stop.wait(0.02)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        assert self._polling.wait(30), "/health did not answer before the work started"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[str]:
    with api_server(tiny_model_dir, "api-server-limits") as (base, _):
        yield base


@pytest.mark.parametrize("kind", list(PATHOLOGICAL))
def test_schemas_too_large_for_a_grammar_are_refused_at_once_and_health_answers(server, kind):
    schema, words = PATHOLOGICAL[kind]
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    forced = {"model": "tiny", "max_tokens": 4, "messages": HELLO, "tool_choice": "required",
              "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]}
    with HealthWatch(server) as health:
        started = time.monotonic()
        assert_clear_error(chat(server, {"model": "tiny", "max_tokens": 4, "messages": HELLO,
                                         "response_format": response_format}), 400, "response_format", words)
        # A tool's parameters are validated with the request (422, like every other problem with them).
        assert_clear_error(chat(server, forced), 422, "tools.0.function.parameters", words)
        took = time.monotonic() - started
    print(f"\n{kind}: both refused in {took:.2f} s; slowest /health meanwhile {health.worst * 1000:.0f} ms")
    assert took < 4 and health.answers and health.worst < 0.5


@pytest.mark.parametrize("kind", sorted(PATHOLOGICAL))
def test_the_pages_and_mcp_tools_refuse_the_same_schemas_before_any_work(tiny_client, kind):
    """Not only the API server: a forced call or response format on the pages (the client itself), and an MCP
    server's tool whose input schema is too large (left out, instead of seconds of meta-schema checking)."""
    from mcp import types

    from app.clients.client_protocol import ClientError, GenerationParams, ResponseFormat, ToolRequest
    from app.mcp_client.mcp_tools import _parameters
    from tests.helpers import collect

    schema, message = PATHOLOGICAL[kind]
    tool = {"type": "function", "function": {"name": "lookup", "description": "", "parameters": schema}}
    started = time.perf_counter()
    with pytest.raises(ClientError, match=message):
        collect(tiny_client, HELLO, GenerationParams(max_new_tokens=5), tools=ToolRequest((tool,), choice="lookup"))
    with pytest.raises(ClientError, match=message):
        collect(tiny_client, HELLO, GenerationParams(max_new_tokens=5),
                response_format=ResponseFormat("json_schema", schema))
    assert _parameters("hostile", types.Tool(name="lookup", input_schema=schema)) is None
    assert time.perf_counter() - started < 5


def test_a_schema_within_the_limits_still_answers(server):
    schema = _object_with({"enum": _words(1000)})
    reply = chat(server, {"model": "tiny", "max_tokens": 30, "messages": HELLO, "temperature": 0,
                          "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}})
    assert reply.status_code == 200, reply.text[:300]


def test_a_grammar_past_the_compile_time_limit_is_400_and_health_answers(tiny_client, monkeypatch):
    # 8,000 enum values compile in several seconds with the tiny model's vocabulary; the limit here is 0.3 s.
    monkeypatch.setenv("DEMO_SCHEMA_MAX_ENUM", "10000")
    monkeypatch.setenv("DEMO_SCHEMA_MAX_NODES", "20000")
    monkeypatch.setenv("DEMO_SCHEMA_MAX_BYTES", "1000000")
    monkeypatch.setenv("DEMO_GRAMMAR_COMPILE_TIMEOUT_S", "0.3")
    schema = {"enum": _words(8000)}
    body = {"model": "tiny", "max_tokens": 4, "messages": HELLO,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}}
    app = create_app(ServerSettings(served_name="tiny"), client=tiny_client)
    with serving(app) as base, HealthWatch(base) as health:
        started = time.monotonic()
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120)
        took = time.monotonic() - started
    print(f"\ncompile past its limit: refused after {took:.2f} s; slowest /health {health.worst * 1000:.0f} ms")
    assert_clear_error(reply, 400, "took longer than 0.3 s", "simplify the JSON Schema")
    assert took < 1.5 and health.worst < 0.5


def test_compiled_grammars_are_cached_and_one_compile_serves_every_waiter():
    calls: list[str] = []
    release = threading.Event()

    class SlowCompiler:
        def compile_grammar(self, ebnf: str) -> str:
            calls.append(ebnf)
            release.wait(5)
            return f"compiled {ebnf}"

    compiler = DeadlineCompiler(SlowCompiler())
    results: list[str] = []
    waiters = [threading.Thread(target=lambda: results.append(compiler.compile_grammar("root ::= \"a\"")))
               for _ in range(4)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.2)
    release.set()
    for waiter in waiters:
        waiter.join(5)
    assert results == ['compiled root ::= "a"'] * 4 and len(calls) == 1


def test_the_real_compiler_answers_a_grammar_again_from_its_cache(tiny_client):
    from app.prompting.dialects.constraint import reply_ebnf

    ebnf = reply_ebnf([], {"enum": _words(1000)})
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        tiny_client.grammar_processors(ebnf)
        timings.append(time.perf_counter() - started)
    print(f"\nthe same grammar compiled in {timings[0] * 1000:.1f} ms, then {timings[1] * 1000:.1f} ms")
    assert timings[1] < timings[0] / 5


def test_at_most_two_grammars_compile_at_once_and_the_rest_give_up_at_their_limit(monkeypatch):
    """A compile past its limit goes on in the background: many distinct slow schemas must not each take a core."""
    monkeypatch.setenv("DEMO_GRAMMAR_COMPILE_TIMEOUT_S", "0.5")
    running, most = [0], [0]
    lock = threading.Lock()

    class Slow:
        def compile_grammar(self, ebnf: str) -> str:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(1.5)
            with lock:
                running[0] -= 1
            return ebnf

    compiler = DeadlineCompiler(Slow())
    outcomes: list[str] = []

    def ask(i: int) -> None:
        try:
            outcomes.append(compiler.compile_grammar(f'root ::= "{i}"'))
        except GrammarTooSlow as exc:
            outcomes.append(str(exc))

    askers = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(10)
    time.sleep(2.5)  # the two that started finish in the background; the others never start
    assert len(outcomes) == 6
    assert all("longer than 0.5 s" in o or "other grammars were being compiled" in o for o in outcomes)
    assert most[0] == 2


def test_a_compile_over_the_limit_raises_grammar_too_slow(monkeypatch):
    monkeypatch.setenv("DEMO_GRAMMAR_COMPILE_TIMEOUT_S", "0.1")

    class Stuck:
        def compile_grammar(self, ebnf: str) -> str:
            time.sleep(1)
            return ebnf

    with pytest.raises(GrammarTooSlow, match="longer than 0.1 s"):
        DeadlineCompiler(Stuck()).compile_grammar("root ::= \"a\"")


# ----- finding 7: connections that never finish a request --------------------------------------------------------

@pytest.fixture(scope="module")
def impatient_server(tiny_model_dir: Path) -> Iterator[str]:
    """`python -m app.frontends.api` with short connection time limits: 1 s for headers, 2 s for a body."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DEMO_DEVICE": "cpu", "DEMO_HTTP_HEADERS_TIMEOUT_S": "1",
           "DEMO_HTTP_BODY_TIMEOUT_S": "2", "DEMO_HTTP_KEEP_ALIVE_S": "1", "DEMO_SERVER_API_KEY": KEY}
    command = [sys.executable, "-m", "app.frontends.api", "--model", str(tiny_model_dir), "--served-model-name", "tiny",
               "--port", str(port)]
    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=ARTIFACTS / "api-server-timeouts.log",
                        start_timeout_s=120, lifetime_s=600):
        yield base


def _closed_after(base: str, send: Callable[[socket.socket], None], limit_s: float = 10) -> float:
    """Seconds until the server closes a connection on which `send` wrote part of a request (fails past
    `limit_s`)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=limit_s) as sock:
        started = time.monotonic()
        threading.Thread(target=send, args=(sock,), daemon=True).start()
        try:
            while sock.recv(4096):  # an answer (a 413, say) may come first; then the close
                pass
        except TimeoutError:
            pytest.fail(f"the server kept the connection open for {limit_s} s")
        except ConnectionResetError:
            pass
        return time.monotonic() - started


def _half_headers(sock: socket.socket) -> None:
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: app")


def _trickled_body(sock: socket.socket) -> None:
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                 "Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n".encode())
    try:
        for _ in range(100):
            sock.sendall(b" ")
            time.sleep(0.2)
    except OSError:  # closed by the server: what the test waits for
        pass


def _trickled_headers(sock: socket.socket) -> None:
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        for i in range(100):
            sock.sendall(f"X-{i}: a\r\n".encode())
            time.sleep(0.2)
    except OSError:
        pass


@pytest.mark.parametrize("send, limit", [
    (lambda sock: None, 1), (_half_headers, 1), (_trickled_headers, 1), (_trickled_body, 2),
], ids=["nothing", "half the headers", "headers trickled", "body trickled"])
def test_a_connection_whose_request_never_completes_is_closed(impatient_server, send, limit):
    closed = _closed_after(impatient_server, send)
    print(f"\nclosed after {closed:.2f} s (limit {limit} s)")
    assert limit - 0.2 < closed < limit + 1.5
    assert httpx.get(f"{impatient_server}/health", timeout=5).status_code == 200


def test_a_slow_but_complete_request_and_a_kept_alive_connection_still_work(impatient_server):
    with httpx.Client(base_url=impatient_server, headers=AUTH, timeout=60) as http:
        for _ in range(3):  # one connection, kept alive between requests well inside its idle time
            assert http.get("/health").status_code == 200
            time.sleep(0.3)
        reply = http.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 2, "messages": HELLO})
    assert reply.status_code == 200


def test_the_mcp_servers_http_mode_closes_half_open_connections_too(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DEMO_SESSIONS_DIR": str(tmp_path / "sessions"), "DEMO_HTTP_HEADERS_TIMEOUT_S": "1",
           "DEMO_MCP_API_KEY": KEY}
    command = [sys.executable, "-m", "app.frontends.mcp", "--http", "--port", str(port)]
    with server_process(command, f"{base}/health", cwd=ROOT, env=env, log=tmp_path / "mcp.log", lifetime_s=300):
        closed = _closed_after(base, _half_headers)
    assert 0.8 < closed < 2.5
