"""Real HTTP servers on 127.0.0.1 for the tests and the benchmarks: `serve(routes)` answers each path with (status,
headers, body); `serving(asgi_app)` runs our API server; `free_port()` finds a port to start one on."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, str], bytes]
Route = Callable[[BaseHTTPRequestHandler, bytes], Reply]


def json_reply(data: Any, status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(data).encode()


@contextmanager
def serve(routes: dict[str, Route]) -> Iterator[str]:
    """Serve `routes` (path without query -> handler) on a free port; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            route = routes.get(self.path.split("?")[0])
            status, headers, payload = route(self, body) if route else (404, {}, b"not found")
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer  # http.server's naming

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_until_healthy(url: str, process: Any, timeout_s: float) -> bool:
    """Poll `url` until it answers 200 (True), or the process exits or time runs out (False)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.3)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(asgi_app: Any) -> Iterator[str]:
    """Serve an ASGI app (our API server) with uvicorn on a free port; yields the base URL, stops after."""
    import time

    import uvicorn

    from app.config import HTTPTimeouts
    from app.limits.http_timeouts import uvicorn_options

    # Requests still running 2 s after the stop are cancelled (and their generations with them); the same
    # connection time limits as `python -m app.frontends.api`.
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           timeout_graceful_shutdown=2, **uvicorn_options(HTTPTimeouts.from_env())))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)
