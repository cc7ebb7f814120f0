"""Servers started as real processes (Streamlit, `make serve`, `make run`). Each runs in its own process
group under `timeout`, so it stops by itself even if pytest is killed, and `stop` ends the whole group (make and
the Python it started)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness.local_http import wait_until_healthy


@contextmanager
def server_process(command: Sequence[str], health_url: str, *, cwd: Path, env: dict[str, str], log: Path,
                   start_timeout_s: float = 120, lifetime_s: int = 1800) -> Iterator[subprocess.Popen]:
    """Start `command`, wait until `health_url` answers 200, yield the process; stop its process group after."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output:
        process = subprocess.Popen(["timeout", str(lifetime_s), *command], cwd=cwd, env=env, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if not wait_until_healthy(health_url, process, start_timeout_s):
                raise RuntimeError(f"{' '.join(command)} did not become healthy; its output:\n{log.read_text()}")
            yield process
        finally:
            stop(process)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


@contextmanager
def listening_process(command: Sequence[str], port: int, host: str = "127.0.0.1",
                      start_timeout_s: float = 60) -> Iterator[subprocess.Popen[bytes]]:
    """Start `command` with a pipe as its stdin (the test servers under tests/mcp_servers stop by themselves once it
    closes), wait until it accepts connections on host:port, yield it; close its stdin and stop it after."""
    import socket
    import time

    process = subprocess.Popen(list(command), stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + start_timeout_s  # a safety net for a slow machine, not a measurement
        while True:
            try:
                socket.create_connection((host, port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(command)} did not start listening on {host}:{port}") from None
                time.sleep(0.1)
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
