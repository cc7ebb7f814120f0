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
