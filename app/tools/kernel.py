"""One Jupyter kernel per browser session: started lazily, every output of a cell collected in order, a cell that
runs too long interrupted (so its output cannot leak into the next cell), a dead kernel restarted."""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from app.config import SandboxLimits, cache_dir

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_KERNEL_NAME = "composite-demo-sandbox"
_SANDBOX_SCRIPT = Path(__file__).with_name("sandbox_kernel.py")
# Variables the kernel keeps from the app's environment; everything else (API keys, tokens...) is dropped.
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")


@dataclass
class CellOutput:
    kind: str  # "text", "image" or "error"
    text: str = ""
    png: bytes = b""


@dataclass
class CellResult:
    outputs: list[CellOutput] = field(default_factory=list)
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)  # what happened to the kernel itself (restarted, died...)

    @property
    def ok(self) -> bool:
        return not self.timed_out and not any(o.kind == "error" for o in self.outputs)

    @property
    def images(self) -> list[bytes]:
        return [o.png for o in self.outputs if o.kind == "image"]

    def text(self) -> str:
        parts: list[str] = []
        figure = 0
        for output in self.outputs:
            if output.kind == "image":
                figure += 1
                parts.append(f"[Figure {figure} was displayed to the user.]\n")
            else:
                parts.append(output.text)
        body = "".join(parts).strip()
        notes = "\n".join(self.notes)
        return "\n".join(p for p in (body or ("" if notes else "(no output)"), notes) if p)


def _kernel_spec_dir() -> Path:
    """A kernel spec whose command starts ipykernel through our resource-limiting launcher."""
    folder = cache_dir() / "kernels"
    spec = folder / _KERNEL_NAME / "kernel.json"
    argv = [sys.executable, str(_SANDBOX_SCRIPT), "-f", "{connection_file}"]
    content = {"argv": argv, "display_name": "Composite demo sandbox", "language": "python"}
    if not spec.is_file() or json.loads(spec.read_text()) != content:
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps(content))
    return folder


class KernelSession:
    """A kernel for one browser session, working in its own folder. Thread-safe: one cell at a time."""

    def __init__(self, workdir: Path, limits: SandboxLimits | None = None) -> None:
        self.workdir = workdir
        self.limits = limits or SandboxLimits.from_env()
        self._manager: KernelManager | None = None
        self._client = None
        self._lock = threading.RLock()
        self._running_msg: str | None = None
        self.last_used = time.monotonic()
        self._closed = False
        threading.Thread(target=self._shutdown_when_idle, name="kernel-idle", daemon=True).start()

    # ----- lifecycle -------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._manager is not None

    def _environment(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
        env.update(
            HOME=str(self.workdir),
            TMPDIR=str(self.workdir / ".tmp"),
            MPLCONFIGDIR=str(self.workdir / ".matplotlib"),
            MPLBACKEND="module://matplotlib_inline.backend_inline",
            PYTHONUNBUFFERED="1",
            DEMO_SANDBOX_MEMORY_MB=str(self.limits.memory_mb),
            DEMO_SANDBOX_CPU_S=str(self.limits.cpu_s),
            DEMO_SANDBOX_FILE_MB=str(self.limits.file_mb),
            DEMO_SANDBOX_PROCESSES=str(self.limits.processes),
        )
        return env

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / ".tmp").mkdir(exist_ok=True)
        manager = KernelManager(
            kernel_name=_KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(_kernel_spec_dir())]),
            # Unix sockets in the session folder instead of TCP ports on 127.0.0.1 other local users could reach.
            transport="ipc",
            ip=str(self.workdir / ".kernel"),
        )
        manager.start_kernel(env=self._environment(), cwd=str(self.workdir))
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
        except RuntimeError:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            raise
        self._manager, self._client = manager, client
        log.info("Started a sandboxed kernel in %s", self.workdir)

    def _stop(self) -> None:
        manager, client = self._manager, self._client
        self._manager = self._client = None
        if client is not None:
            client.stop_channels()
        if manager is not None:
            try:
                manager.shutdown_kernel(now=True)
            except Exception:  # already dead
                log.debug("kernel shutdown", exc_info=True)

    def restart(self) -> None:
        with self._lock:
            self._stop()
            self._start()

    def shutdown(self) -> None:
        self._closed = True
        with self._lock:
            self._stop()

    def _shutdown_when_idle(self) -> None:
        while not self._closed:
            time.sleep(min(30.0, max(1.0, self.limits.idle_shutdown_s / 4)))
            if self.started and time.monotonic() - self.last_used > self.limits.idle_shutdown_s:
                with self._lock:
                    if time.monotonic() - self.last_used > self.limits.idle_shutdown_s:
                        log.info("Shutting down an idle kernel in %s", self.workdir)
                        self._stop()

    # ----- running code ----------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop the running cell (the Stop button); the kernel and its variables survive."""
        manager = self._manager
        if manager is not None and self._running_msg is not None:
            manager.interrupt_kernel()

    def execute(self, code: str, timeout_s: float | None = None) -> CellResult:
        timeout_s = self.limits.cell_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            result = CellResult()
            if self._manager is None or not self._manager.is_alive():
                if self._manager is not None:
                    result.notes.append("[The Python kernel had stopped (out of memory or CPU time?) and was "
                                        "restarted: earlier variables are gone.]")
                    self._stop()
                self._start()
            try:
                self._run(code, timeout_s, result)
            finally:
                self.last_used = time.monotonic()
            return result

    def _run(self, code: str, timeout_s: float, result: CellResult) -> None:
        assert self._client is not None and self._manager is not None
        msg_id = self._client.execute(code, store_history=True, allow_stdin=False)
        self._running_msg = msg_id
        deadline = time.monotonic() + timeout_s
        interrupted_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if interrupted_at is None and now >= deadline:
                    self._manager.interrupt_kernel()
                    interrupted_at = now
                    result.timed_out = True
                    result.notes.append(f"[Stopped: the cell ran longer than {timeout_s:g} s.]")
                if interrupted_at is not None and now - interrupted_at > 5:
                    # The interrupt did not take (e.g. stuck in C code): a fresh kernel is the only clean state.
                    result.notes.append("[The kernel did not respond to the interrupt and was restarted: earlier "
                                        "variables are gone.]")
                    self._stop()
                    self._start()
                    return
                try:
                    message = self._client.get_iopub_msg(timeout=0.2)
                except queue.Empty:
                    if not self._manager.is_alive():
                        result.notes.append("[The Python kernel died while running this cell (out of memory or CPU "
                                            "time?). It will restart on the next call; earlier variables are gone.]")
                        self._stop()
                        return
                    continue
                if message.get("parent_header", {}).get("msg_id") != msg_id:
                    continue  # output of an earlier, interrupted cell: never mixed into this one
                if self._collect(message, result):
                    return
        finally:
            self._running_msg = None

    @staticmethod
    def _collect(message: dict, result: CellResult) -> bool:
        """Add one iopub message to the result; True once the cell is finished."""
        kind, content = message["msg_type"], message["content"]
        if kind == "status" and content.get("execution_state") == "idle":
            return True
        if kind == "stream":
            if result.outputs and result.outputs[-1].kind == "text":
                result.outputs[-1].text += content.get("text", "")
            else:
                result.outputs.append(CellOutput("text", content.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            data = content.get("data", {})
            if "image/png" in data:
                result.outputs.append(CellOutput("image", png=base64.b64decode(data["image/png"])))
            elif "text/plain" in data:
                result.outputs.append(CellOutput("text", data["text/plain"] + "\n"))
        elif kind == "error":
            traceback = _ANSI.sub("", "\n".join(content.get("traceback", [])))
            result.outputs.append(CellOutput("error", traceback or f"{content.get('ename')}: {content.get('evalue')}"))
        elif kind == "clear_output":
            result.outputs.clear()
        return False
