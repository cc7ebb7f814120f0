"""One Jupyter kernel per browser session: started lazily inside its sandbox (app/tools/sandbox.py), every output
of a cell collected in order and capped, a cell that runs too long interrupted (so its output cannot leak into the
next cell), a dead kernel restarted. The kernel is reached over Unix sockets in the session's folder, never a TCP
port."""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import re
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from app.config import SandboxLimits
from app.tools import sandbox
from app.tools.sandbox import SessionLayout
from app.tools.sandbox_cgroup import SandboxCgroup

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_KERNEL_NAME = "composite-demo-sandbox"
# A message bigger than this from the kernel drops its connection instead of filling the app's memory (plots are a
# few MB at most; text is capped far below it, in the kernel and again here).
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
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
    died: bool = False  # the kernel stopped while running the cell
    notes: list[str] = field(default_factory=list)  # what happened to the kernel itself (restarted, died...)
    text_chars: int = 0  # characters of text kept so far, for the output cap

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.died and not any(o.kind == "error" for o in self.outputs)

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


def _write_kernel_spec(layout: SessionLayout, limits: SandboxLimits, cgroup: SandboxCgroup | None) -> Path:
    """This session's kernel spec: its command is ipykernel inside the session's sandbox. Interrupts go as a
    message on the control socket, because a signal to the sandbox's launcher would not reach the kernel."""
    spec = layout.specs / _KERNEL_NAME / "kernel.json"
    content = {"argv": sandbox.kernel_argv(layout, limits, cgroup), "display_name": "Composite demo sandbox",
               "language": "python", "interrupt_mode": "message"}
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(content))
    return layout.specs


class KernelSession:
    """A kernel for one browser session, with its own folder. Thread-safe: one cell at a time."""

    def __init__(self, folder: Path, limits: SandboxLimits | None = None) -> None:
        self.layout = SessionLayout(folder)
        self.limits = limits or SandboxLimits.from_env()
        self._manager: KernelManager | None = None
        self._context: zmq.Context | None = None
        self._cgroup: SandboxCgroup | None = None
        self._client = None
        self._lock = threading.RLock()
        # bubblewrap dies with the thread that started it (PR_SET_PDEATHSIG follows threads, not processes), so
        # kernels are started from this session's own long-lived thread, never from a tool call's passing one.
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-launcher")
        self._running_msg: str | None = None
        self.last_used = time.monotonic()
        self._closed = False
        threading.Thread(target=self._shutdown_when_idle, name="kernel-idle", daemon=True).start()

    # ----- lifecycle -------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._manager is not None

    @property
    def working_folder(self) -> str:
        """The kernel's current folder, as the code running in it sees it."""
        return sandbox.working_folder(self.layout, self.limits)

    def _environment(self, uid: int | None) -> dict[str, str]:
        env = {name: os.environ[name] for name in _KEPT_ENV if name in os.environ}
        home = self.working_folder
        env.update(
            HOME=home,
            TMPDIR=f"{home}/.tmp",
            MPLCONFIGDIR=f"{home}/.matplotlib",
            MPLBACKEND="module://matplotlib_inline.backend_inline",
            PYTHONUNBUFFERED="1",
            DEMO_SANDBOX_MEMORY_MB=str(self.limits.memory_mb),
            DEMO_SANDBOX_CPU_S=str(self.limits.cpu_s),
            DEMO_SANDBOX_FILE_MB=str(self.limits.file_mb),
            DEMO_SANDBOX_PROCESSES=str(self.limits.processes),
            DEMO_SANDBOX_OUTPUT_CHARS=str(self.limits.output_chars),
            DEMO_SANDBOX_UPLOADS=sandbox.uploads_folder(self.layout, self.limits),
        )
        if uid is not None:
            env["DEMO_SANDBOX_UID"] = str(uid)
        return env

    def _start(self) -> None:
        """Start the kernel in its sandbox; SandboxUnavailable when the configured isolation cannot be had."""
        self._launcher.submit(self._launch).result()

    def _launch(self) -> None:
        sandbox.check_available(self.limits)
        layout = self.layout
        layout.create()
        uid = sandbox.sandbox_uid(layout) if self.limits.isolation != "none" else None
        run = layout.run
        if uid is not None:
            os.chown(run, uid, uid)  # the kernel, as its own user, creates its sockets here
        if self.limits.isolation != "none":
            self._cgroup = SandboxCgroup.make(f"composite-demo-{layout.folder.name}", self.limits.total_memory_mb,
                                              self.limits.processes)
        context = zmq.Context()
        context.setsockopt(zmq.MAXMSGSIZE, _MAX_MESSAGE_BYTES)
        specs = _write_kernel_spec(layout, self.limits, self._cgroup)
        manager = KernelManager(
            kernel_name=_KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs)]),
            transport="ipc",
            ip=str(run / "kernel"),
            connection_file=str(run / "connection.json"),
            context=context,
        )
        manager.write_connection_file()
        if uid is not None:
            os.chown(manager.connection_file, uid, uid)
        manager.start_kernel(env=self._environment(uid), cwd=str(layout.work))
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
        except RuntimeError:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            context.destroy(linger=0)
            self._remove_cgroup()
            raise
        if uid is not None:  # its sockets exist: from now on the kernel cannot write in this host folder at all
            os.chown(run, 0, 0)
            run.chmod(0o755)
        self._manager, self._client, self._context = manager, client, context
        log.info("Started a kernel (%s) for %s", self.limits.isolation, layout.folder)

    def _stop(self) -> None:
        """Kill the kernel: with bubblewrap, killing its launcher ends every process in its PID namespace."""
        manager, client, context = self._manager, self._client, self._context
        self._manager = self._client = self._context = None
        if client is not None:
            client.stop_channels()
        if manager is not None:
            try:
                manager.shutdown_kernel(now=True)
            except Exception:  # already dead
                log.debug("kernel shutdown", exc_info=True)
            manager.cleanup_resources()
        if context is not None:
            context.destroy(linger=0)
        self._remove_cgroup()

    def _remove_cgroup(self) -> None:
        cgroup, self._cgroup = self._cgroup, None
        if cgroup is not None:
            cgroup.remove()

    def _death_reason(self) -> str:
        """What most likely killed the kernel, for the note the model and the user read."""
        if self._cgroup is not None and self._cgroup.out_of_memory():
            return f"it ran out of memory: {self.limits.total_memory_mb} MB for all its processes and files"
        return "out of memory or CPU time?"

    def restart(self) -> None:
        with self._lock:
            self._stop()
            self._start()

    def shutdown(self) -> None:
        self._closed = True
        with self._lock:
            self._stop()
        self._launcher.shutdown(wait=False)

    def _shutdown_when_idle(self) -> None:
        while not self._closed:
            time.sleep(min(30.0, max(1.0, self.limits.idle_shutdown_s / 4)))
            if self.started and time.monotonic() - self.last_used > self.limits.idle_shutdown_s:
                with self._lock:
                    if time.monotonic() - self.last_used > self.limits.idle_shutdown_s:
                        log.info("Shutting down an idle kernel in %s", self.layout.folder)
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
                        result.died = True
                        result.notes.append(f"[The Python kernel died while running this cell ({self._death_reason()}"
                                            "). It will restart on the next call; earlier variables are gone.]")
                        self._stop()
                        return
                    continue
                if message.get("parent_header", {}).get("msg_id") != msg_id:
                    continue  # output of an earlier, interrupted cell: never mixed into this one
                # The kernel cuts at output_chars with its own note; this is the backstop for code that undid that.
                if self._collect(message, result, self.limits.output_chars + 1000):
                    return
        finally:
            self._running_msg = None

    @staticmethod
    def _collect(message: dict, result: CellResult, max_chars: int) -> bool:
        """Add one iopub message to the result; True once the cell is finished. Text beyond `max_chars` per cell is
        dropped with one note (the kernel caps its own output too, but code can undo that)."""
        kind, content = message["msg_type"], message["content"]
        if kind == "status" and content.get("execution_state") == "idle":
            return True
        if kind == "stream":
            _add_text(result, str(content.get("text", "")), max_chars)
        elif kind in ("execute_result", "display_data"):
            data = content.get("data", {})
            if "image/png" in data:
                result.outputs.append(CellOutput("image", png=base64.b64decode(data["image/png"])))
            elif "text/plain" in data:
                _add_text(result, str(data["text/plain"]) + "\n", max_chars, new_output=True)
        elif kind == "error":
            traceback = _ANSI.sub("", "\n".join(content.get("traceback", []))[: max_chars])
            result.outputs.append(CellOutput("error", traceback or f"{content.get('ename')}: {content.get('evalue')}"))
        elif kind == "clear_output":
            result.outputs.clear()
            result.text_chars = 0
        return False


def _add_text(result: CellResult, text: str, max_chars: int, new_output: bool = False) -> None:
    room = max_chars - result.text_chars
    if room <= 0:
        return
    if len(text) > room:
        text = text[:room] + f"\n[Output cut: the cell printed more than {max_chars:,} characters.]\n"
        result.text_chars = max_chars
    else:
        result.text_chars += len(text)
    if not new_output and result.outputs and result.outputs[-1].kind == "text":
        result.outputs[-1].text += text
    else:
        result.outputs.append(CellOutput("text", text))
