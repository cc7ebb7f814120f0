"""The app's side of a llama.cpp runner process (app/clients/llamacpp/runner.py): start it, hand it replies to
generate, route what it sends back to each reply's feed, and notice when it dies.

As vLLM's engine core and Ollama's per-model runners do, the native engine lives in a child process: a segmentation
fault, an illegal instruction, an abort or the OOM killer there ends the replies in flight with an error that says
what happened, and the app, its other backends and every other session go on. The next reply starts the runner again
(the model loads anew: seconds for a small GGUF) and says so.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from app.clients.llamacpp import frames as protocol
from app.clients.streaming import EngineFeed, EngineOutput

log = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 900.0  # a 70B GGUF read from a slow disk takes minutes; a runner silent for longer is stuck


class EngineStopped(RuntimeError):
    """The runner process ended while replies were in flight (or could not start)."""


class EngineProcess:
    """One runner process for one GGUF, restarted on demand. Thread-safe: every session's replies go through it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self.warmed_tokens = 0  # what the context held after the last warm-up
        self.last_exit: str | None = None  # why the previous runner ended, until a new one is up
        self._ids = itertools.count(1)
        self._feeds: dict[int, EngineFeed] = {}
        self._on_started: dict[int, Callable[[], None]] = {}
        self._calls: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._lock = threading.Lock()  # the process, the feeds and the calls
        self._send_lock = threading.Lock()
        self._start_lock = threading.Lock()  # one (re)start at a time
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._start()

    # ----- the process ----------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._conn is not None

    def _start(self) -> None:
        """Start a runner and wait until its model has loaded; EngineStopped, with llama.cpp's reason or the
        runner's end, when it cannot."""
        parent_sock, child_sock = socket.socketpair()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.clients.llamacpp.runner", str(child_sock.fileno())],
                pass_fds=(child_sock.fileno(),), env=env, stdin=subprocess.DEVNULL, start_new_session=False,
            )
        finally:
            child_sock.close()
        conn = Connection(parent_sock.detach())
        try:
            conn.send_bytes(json.dumps(self.config).encode())
            reply = self._wait_ready(proc, conn)
        except BaseException:
            conn.close()
            _end(proc)
            raise
        self._proc, self._conn, self.info = proc, conn, reply
        threading.Thread(target=self._read, args=(proc, conn), name="llamacpp-engine-reader", daemon=True).start()

    def _wait_ready(self, proc: subprocess.Popen[bytes], conn: Connection) -> dict[str, Any]:
        waited = 0.0
        while not conn.poll(1.0):
            waited += 1.0
            if proc.poll() is not None or waited > LOAD_TIMEOUT_S:
                break
        else:
            try:
                reply = json.loads(conn.recv_bytes(protocol.MAX_MESSAGE_BYTES))
            except (EOFError, OSError, ValueError):
                reply = {}
            if reply.get("op") == "ready":
                return dict(reply)
            if reply.get("op") == "failed":
                raise EngineStopped(str(reply.get("error") or "llama.cpp refused it"))
        _end(proc)
        raise EngineStopped(f"the engine process ended while loading it: {protocol.exit_reason(proc.poll())}")

    def ensure_running(self) -> str | None:
        """Start a new runner if the last one died; a notice saying so, or None when it was running."""
        with self._start_lock:
            if self.alive() or self._closed:
                return None
            reason = self.last_exit or "it had stopped"
            self._start()
            self.restarts += 1
            self.last_exit = None
            return (f"The llama.cpp engine had stopped ({reason}); it was started again for this answer, with an "
                    "empty prompt cache.")

    def _read(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        """Route the runner's messages until its socket closes; then fail whatever was in flight."""
        try:
            while True:
                self._dispatch(json.loads(conn.recv_bytes(protocol.MAX_MESSAGE_BYTES)))
        except (EOFError, OSError, ValueError, KeyError, TypeError) as exc:
            if not isinstance(exc, EOFError | OSError):
                log.error("llama.cpp runner sent a malformed message (%s); stopping it", exc)
        _end(proc)
        reason = protocol.exit_reason(proc.returncode)
        with self._lock:
            if self._proc is proc:
                self._conn = None
            feeds, self._feeds = self._feeds, {}
            self._on_started.clear()
            calls, self._calls = self._calls, {}
        conn.close()
        if self._closed and not feeds:
            return
        log.error("llama.cpp runner (pid %s) stopped: %s", proc.pid, reason)
        self.last_exit = reason
        for feed in feeds.values():
            feed.fail(EngineStopped(f"the engine stopped while answering: {reason}. The app is fine; the next "
                                    "message starts the engine again."))
            feed.close()
        for done, _ in calls.values():
            done.set()

    def _dispatch(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "warmed":
            self.warmed_tokens = int(message["tokens"])
            return
        request_id = int(message["id"])
        if op == "stats":
            with self._lock:
                call = self._calls.pop(request_id, None)
            if call is not None:
                call[1].update(message)
                call[0].set()
            return
        with self._lock:
            feed = self._feeds.get(request_id)
            started = self._on_started.pop(request_id, None) if op in ("started", "done", "error") else None
            if op in ("done", "error"):
                self._feeds.pop(request_id, None)
        if started is not None:
            started()
        if feed is None:
            return
        if op == "started":
            feed.put(EngineOutput(cached_tokens=int(message["cached"])))
        elif op == "text":
            feed.put(EngineOutput(text=str(message["text"]), tokens=int(message["n"])))
        elif op == "done":
            prompt, completion = message["usage"]
            feed.put(EngineOutput(text=str(message["text"]), tokens=int(message["n"]),
                                  finish_reason=str(message["finish"]), usage=(int(prompt), int(completion))))
            feed.close()
        elif op == "error":
            feed.fail(RuntimeError(str(message["error"])))
            feed.close()

    # ----- requests -------------------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> bool:
        conn = self._conn
        if conn is None:
            return False
        try:
            with self._send_lock:
                conn.send_bytes(json.dumps(message).encode())
            return True
        except (OSError, ValueError):
            return False

    def submit(self, request: dict[str, Any], feed: EngineFeed, on_started: Callable[[], None]) -> int:
        """Queue a reply; its outputs go to `feed`, and `on_started` is called once it leaves the queue (or ends)."""
        request_id = next(self._ids)
        with self._lock:
            self._feeds[request_id] = feed
            self._on_started[request_id] = on_started
        if not self._send({**request, "op": "generate", "id": request_id}):
            with self._lock:
                self._feeds.pop(request_id, None)
                self._on_started.pop(request_id, None)
            on_started()
            feed.fail(EngineStopped(f"the engine is not running ({self.last_exit or 'it stopped'})"))
            feed.close()
        return request_id

    def warm(self, tokens: list[int]) -> None:
        """Have the runner read `tokens` into its context (and so its prompt cache) while no reply waits."""
        self._send({"op": "warm", "tokens": tokens})

    def abort(self, request_id: int) -> None:
        self._send({"op": "abort", "id": request_id})

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        """The runner's prompt-cache figures ({} when it does not answer)."""
        request_id = next(self._ids)
        done, reply = threading.Event(), dict[str, Any]()
        with self._lock:
            self._calls[request_id] = (done, reply)
        if self._send({"op": "stats", "id": request_id}):
            done.wait(timeout)
        with self._lock:
            self._calls.pop(request_id, None)
        return reply

    def kill(self, sig: int) -> None:
        """Send the runner a signal (tests of crash containment)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, sig)

    def close(self) -> None:
        self._closed = True
        self._send({"op": "shutdown"})
        if self._proc is not None:
            _end(self._proc, grace_s=5.0)


def _end(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """Wait for a runner to exit; kill it if it has not within `grace_s`."""
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
