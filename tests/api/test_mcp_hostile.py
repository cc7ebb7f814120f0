"""A hostile MCP server cannot freeze, flood or steer the app (security review, item 3). Against a real server
process written with the SDK (tests/mcp_servers/hostile_server.py, answering plain JSON rather than SSE) and the
app's real MCP client: a backtracking regex in an outputSchema, a 20 MB result, a result of 50 images, a DNS
answer that changes between the check and the connection; and a question whose schema points at a URL."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.config import McpSettings
from app.limits.schema_validation import SchemaValidator
from app.mcp_client import McpManager, bearer_server, mcp_registry
from app.mcp_client.elicitation import form_problem
from harness.local_http import free_port
from harness.processes import listening_process

SERVER = Path(__file__).parent.parent / "mcp_servers" / "hostile_server.py"
TOKEN = "hostile-token"


def _serving(port: int) -> AbstractContextManager[subprocess.Popen[bytes]]:
    return listening_process([sys.executable, str(SERVER), str(port), TOKEN, "127.0.0.1"], port)


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    port = free_port()
    with _serving(port):
        yield f"http://127.0.0.1:{port}/mcp"


def _manager(url: str, **settings: Any) -> McpManager:
    return McpManager(McpSettings(connect_timeout_s=60, **settings), servers={"hostile": bearer_server(url, TOKEN)})


class _Ticker:
    """A thread that notes the longest pause between its ticks: how long the process stood still."""

    def __init__(self) -> None:
        self.longest, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.01):
            now = time.monotonic()
            self.longest, last = max(self.longest, now - last), now

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_backtracking_output_schema_regex_neither_freezes_the_app_nor_passes(hostile):
    """Python's `re` took about 7 s (GIL held, every user frozen) per check of this value, and the result was checked
    three times (the SDK, the result's text, the registry). Now: the regex limit, with the process running on."""
    mcp = _manager(hostile)
    try:
        mcp.refresh(mcp.connections())
        registry = mcp_registry(mcp, mcp.connections())
        with _Ticker() as ticker:
            started = time.monotonic()
            result = registry.call("backtrack", {})
            took = time.monotonic() - started
        assert not result.ok and "could not be checked against the pattern '^(a|aa)+$' within 0.5 s" in result.content
        # Wall time: the limit counts CPU time, and the test machine may be busy.
        assert took < 10 and ticker.longest < 0.5, (took, ticker.longest)
        assert mcp.connections()[0].status().state == "connected"
    finally:
        mcp.close()


def test_the_reviews_regex_probe_is_quick():
    """The review's probe: `^(a+)+$` against 24 a's and a "!" held the GIL for 0.93 s, doubling with each a."""
    schema = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^(a+)+$"}},
              "patternProperties": {"^(a|aa)+$": {}}, "additionalProperties": False}
    started = time.thread_time()  # CPU time, as the limit counts it: the test machine may be busy
    errors = SchemaValidator(schema).errors({"w": "a" * 30 + "!"})
    assert time.thread_time() - started < 0.1 and [e.message for e in errors] == [f"'{'a' * 30}!' does not match "
                                                                                   "'^(a+)+$'"]
    started = time.thread_time()
    errors = SchemaValidator(schema).errors({"a" * 36 + "!": 1})  # patternProperties, then additionalProperties
    assert time.thread_time() - started < 0.7 and "could not be checked" in errors[0].message


def test_a_result_larger_than_the_limit_is_not_read_and_the_server_stays_usable(hostile):
    """A plain JSON answer used to be read whole, whatever its size (100 MB of text kept, +197 MB)."""
    mcp = _manager(hostile, max_result_mb=1)
    try:
        mcp.refresh(mcp.connections())
        registry = mcp_registry(mcp, mcp.connections())
        flood = registry.call("flood", {"mb": 20})
        assert not flood.ok and "larger than 1 MB (DEMO_MCP_MAX_RESULT_MB)" in flood.content, flood.content[:300]
        assert registry.call("gallery", {"count": 1}).ok  # the same connection answers the next call
    finally:
        mcp.close()


def test_a_result_keeps_at_most_max_images(hostile):
    mcp = _manager(hostile, max_images=3)
    try:
        mcp.refresh(mcp.connections())
        result = mcp_registry(mcp, mcp.connections()).call("gallery", {"count": 50})
    finally:
        mcp.close()
    assert result.ok and len(result.attachments) == 3
    assert result.content.endswith("[47 more image(s) not shown: a tool result shows at most 3]")


class _Recorder(BaseHTTPRequestHandler):
    """An internal service: notes every request (and its Authorization header) and answers 404."""

    seen: list[tuple[str, str, str]] = []

    def _answer(self) -> None:
        self.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_DELETE = _answer  # http.server's naming

    def log_message(self, *args: Any) -> None:
        pass


def test_a_user_added_server_is_reached_at_the_checked_address_whatever_dns_answers_next(monkeypatch):
    """The attacker's DNS names the public server (here 127.0.0.1, allowed) when the guard asks, and an internal
    address (here 127.0.0.2, refused by the guard) when the connection looks the name up again. Before, the user's
    bearer token went to the internal service in two POSTs."""
    _Recorder.seen = []
    port = free_port()
    with _serving(port):
        internal = ThreadingHTTPServer(("127.0.0.2", port), _Recorder)
        threading.Thread(target=internal.serve_forever, daemon=True).start()
        real_lookup, real_connect = socket.getaddrinfo, socket.socket.connect
        asked: list[str] = []

        def rebinding(host: Any, port_: Any, *args: Any, **kwargs: Any) -> Any:
            if (host.decode() if isinstance(host, bytes) else host) != "rebind.example":  # anyio asks in bytes
                return real_lookup(host, port_, *args, **kwargs)
            checking = sys._getframe(1).f_code.co_name == "check_url"
            asked.append("check" if checking else "connect")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1" if checking else "127.0.0.2", port_))]

        def loopback_only(self: socket.socket, address: Any) -> Any:  # the project's rule: never leave the machine
            if self.family in (socket.AF_INET, socket.AF_INET6) and not str(address[0]).startswith(("127.", "::1")):
                raise OSError(f"the tests connect to loopback only, not {address[0]}")
            return real_connect(self, address)

        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        monkeypatch.setattr(socket.socket, "connect", loopback_only)
        monkeypatch.setenv("DEMO_BROWSER_ALLOW", "127.0.0.1")
        mcp = McpManager(McpSettings(connect_timeout_s=60), servers={})
        try:
            added = mcp.add_server("alice", "rebind", bearer_server(f"http://rebind.example:{port}/mcp", TOKEN))
            mcp.refresh([added])
            assert added.status().state == "connected", added.status().message
            assert mcp_registry(mcp, [added]).call("gallery", {"count": 1}).ok
        finally:
            mcp.close()
            internal.shutdown()
            internal.server_close()
    assert _Recorder.seen == [] and "connect" not in asked and "check" in asked


def test_a_questions_remote_ref_is_never_fetched():
    """An elicitation schema with `allOf: [{$ref: URL}]` made the app fetch URL when the user pressed Send, and show
    the fetched value in the error. Now the question is refused when it is asked, and the check at Send (should
    such a schema get there) fetches nothing and says why."""
    from app.frontends.streamlit.question_forms import _problem

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/secret.json"
        schema = {"type": "object", "properties": {"name": {"type": "string", "allOf": [{"$ref": url}]}}}
        assert form_problem(schema) == "it refers to other schemas ($ref), which a form does not follow"
        problem = _problem(schema, {"name": "Ada"})
    finally:
        server.shutdown()
        server.server_close()
    assert _Recorder.seen == []
    assert problem == (f"the question's form cannot be checked: it refers to '{url}', which is not inside it "
                       "(references outside a schema are never fetched); decline it.")
