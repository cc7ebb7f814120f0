"""One Jupyter kernel per browser session: started lazily inside its sandbox (app/tools/sandbox/isolation.py), every
output of a cell collected in order and capped as it arrives (app/tools/sandbox/output.py), a cell that runs too long
interrupted (so its output cannot leak into the next cell) and the processes it started ended, a dead kernel
restarted. At most `max_live` sandboxes run in one process: the oldest idle one makes room, else the call is
refused as busy. The kernel is reached over Unix sockets in the session's folder, never a TCP port."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import zmq
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from app.config import SandboxLimits
from app.tools.sandbox import isolation
from app.tools.sandbox.cgroup import SandboxCgroup
from app.tools.sandbox.isolation import SessionLayout
from app.tools.sandbox.output import CellOutput, CellResult, OutputCollector
from app.tools.sandbox.processes import kill_cell_processes

__all__ = ["CellOutput", "CellResult", "KernelSession", "SandboxBusy", "SandboxLimits"]

log = logging.getLogger(__name__)

_KERNEL_NAME = "composite-demo-sandbox"
# Messages the app's sockets take from the kernel: one bigger than the largest picture a cell may show (base64)
# drops the connection instead of filling the app's memory, and at most this many wait unread per socket (past it
# the kernel's further output is dropped), so a flooding cell cannot queue gigabytes before it is stopped.
_MIN_MESSAGE_BYTES = 16 * 1024 * 1024
_QUEUED_MESSAGES = 64
_INTERRUPT_GRACE_S = 3.0  # an interrupted cell that still runs after this: the kernel is stopped instead
# Variables the kernel keeps from the app's environment; everything else (API keys, tokens...) is dropped.
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")

# The sandboxes of this process that are running or starting (each may take total_memory_mb): see _admit.
_live: weakref.WeakSet[KernelSession] = weakref.WeakSet()
_live_lock = threading.RLock()


class SandboxBusy(RuntimeError):
    """As many sandboxes as allowed are running cells: this one cannot start now."""


def _max_message_bytes(limits: SandboxLimits) -> int:
    return max(_MIN_MESSAGE_BYTES, int(limits.image_mb * 1024 * 1024 * 4 / 3) + 1024 * 1024)


def _write_kernel_spec(layout: SessionLayout, limits: SandboxLimits, cgroup: SandboxCgroup | None) -> Path:
    """This session's kernel spec: its command is ipykernel inside the session's sandbox. Interrupts go as a
    message on the control socket, because a signal to the sandbox's launcher would not reach the kernel."""
    spec = layout.specs / _KERNEL_NAME / "kernel.json"
    content = {"argv": isolation.kernel_argv(layout, limits, cgroup), "display_name": "Composite demo sandbox",
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
        self._client: BlockingKernelClient | None = None
        self._lock = threading.RLock()
        # bubblewrap dies with the thread that started it (PR_SET_PDEATHSIG follows threads, not processes), so
        # kernels are started from this session's own long-lived thread, never from a tool call's passing one.
        self._launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-launcher")
        self._running_msg: str | None = None
        # Stop while a call starts the kernel (seconds, on a first call): its cell is not sent at all. The flag is
        # only set inside a call's execute(), so a late Stop can never skip the next call's cell.
        self._cell_state = threading.Lock()
        self._in_execute = False
        self._stop_before_running = False
        self.last_used = time.monotonic()
        self._closed = False
        self._evicted = False  # stopped to make room for another session's sandbox
        threading.Thread(target=self._shutdown_when_idle, name="kernel-idle", daemon=True).start()

    # ----- lifecycle -------------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._manager is not None

    @property
    def working_folder(self) -> str:
        """The kernel's current folder, as the code running in it sees it."""
        return isolation.working_folder(self.layout, self.limits)

    def _environment(self) -> dict[str, str]:
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
            DEMO_SANDBOX_UPLOADS=isolation.uploads_folder(self.layout, self.limits),
        )
        return env

    def _start(self) -> None:
        """Start the kernel in its sandbox; SandboxUnavailable when the configured isolation cannot be had,
        SandboxBusy when too many sandboxes run cells."""
        self._admit()
        try:
            self._launcher.submit(self._launch).result()
        except BaseException:
            self._release()
            raise

    def _admit(self) -> None:
        """Count this sandbox among the live ones: past `max_live`, the least recently used idle one is stopped
        to make room; when none is idle, SandboxBusy (the memory of each may reach total_memory_mb)."""
        with _live_lock:
            while 0 < self.limits.max_live <= len([k for k in _live if k is not self]):
                idle = sorted((k for k in _live if k is not self), key=lambda k: k.last_used)
                if not any(k._stop_if_idle() for k in idle):
                    raise SandboxBusy(f"The Python sandbox is busy: {self.limits.max_live} sandboxes are running "
                                      "code right now (DEMO_KERNEL_MAX_LIVE). Try again in a minute.")
            _live.add(self)

    def _release(self) -> None:
        with _live_lock:
            _live.discard(self)

    def _stop_if_idle(self) -> bool:
        """Stop this kernel unless it is running or starting a cell; whether it was stopped."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._running_msg is not None:
                return False
            log.info("Stopping the idle kernel in %s to make room for another", self.layout.folder)
            self._stop()
            self._evicted = True
            return True
        finally:
            self._lock.release()

    def _launch(self) -> None:
        isolation.check_available(self.limits)
        layout = self.layout
        layout.create()
        uid = isolation.sandbox_uid(layout) if self.limits.isolation != "none" else None
        run = layout.run
        if uid is not None:
            os.chown(run, uid, uid)  # the kernel, as its own user, creates its sockets here
        if self.limits.isolation != "none":
            self._cgroup = SandboxCgroup.make(f"composite-demo-{layout.folder.name}", self.limits.total_memory_mb,
                                              self.limits.processes, self.limits.cpus)
        context = zmq.Context()
        context.setsockopt(zmq.MAXMSGSIZE, _max_message_bytes(self.limits))
        context.setsockopt(zmq.RCVHWM, _QUEUED_MESSAGES)
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
        manager.start_kernel(env=self._environment(), cwd=str(layout.work))
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
        self._release()

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
        """Stop the running cell (the Stop button) and the processes it started; the kernel and its variables
        survive."""
        with self._cell_state:
            if self._running_msg is None:
                self._stop_before_running = self._in_execute  # the cell is about to be sent: it will not be
                return
        manager = self._manager
        if manager is not None:
            manager.interrupt_kernel()
            self._end_cell_processes(manager)

    def _end_cell_processes(self, manager: KernelManager) -> int:
        """Kill what the cell started (subprocesses, daemons): they would outlive the cell."""
        process = getattr(manager.provisioner, "process", None)
        if process is None:
            return 0
        return kill_cell_processes(process.pid, isolation.kernel_pids_inside(self.layout, self.limits))

    def execute(self, code: str, timeout_s: float | None = None) -> CellResult:
        timeout_s = self.limits.cell_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            with self._cell_state:
                self._in_execute, self._stop_before_running = True, False
            try:
                return self._execute(code, timeout_s)
            finally:
                with self._cell_state:
                    self._in_execute = self._stop_before_running = False

    def _execute(self, code: str, timeout_s: float) -> CellResult:
        result = CellResult()
        if self._manager is None or not self._manager.is_alive():
            if self._manager is not None:
                result.notes.append("[The Python kernel had stopped (out of memory or CPU time?) and was "
                                    "restarted: earlier variables are gone.]")
                self._stop()
            elif self._evicted:
                result.notes.append("[The Python kernel had been stopped while idle to make room for other "
                                    "sessions, and was restarted: earlier variables are gone.]")
            self._start()
            self._evicted = False
        try:
            self._run(code, timeout_s, result)
        finally:
            self.last_used = time.monotonic()
        return result

    def _run(self, code: str, timeout_s: float, result: CellResult) -> None:
        assert self._client is not None and self._manager is not None
        manager = self._manager
        with self._cell_state:
            if self._stop_before_running:
                result.stopped = True
                result.notes.append("[Stopped before the cell ran: the kernel was still starting.]")
                return
            msg_id = self._client.execute(code, store_history=True, allow_stdin=False)
            self._running_msg = msg_id
        collector = OutputCollector(result, self.limits)
        deadline = time.monotonic() + timeout_s
        interrupted_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if interrupted_at is None and (now >= deadline or collector.flooding):
                    manager.interrupt_kernel()
                    interrupted_at = now
                    result.timed_out = True
                    result.notes.append(f"[Stopped: the cell ran longer than {timeout_s:g} s.]" if now >= deadline
                                        else "[Stopped: the cell kept sending output far past its limits.]")
                    if self._end_cell_processes(manager):
                        result.notes.append("[The processes the cell started were ended too.]")
                if interrupted_at is not None and now - interrupted_at > _INTERRUPT_GRACE_S:
                    # The interrupt did not take (e.g. stuck in C code): a fresh kernel is the only clean state. The
                    # next call starts it, so this one ends now and the kernel's lock is free for that call.
                    result.notes.append("[The kernel did not respond to the interrupt and was stopped: the next call "
                                        "starts a fresh one, earlier variables are gone.]")
                    self._stop()
                    return
                try:
                    message = self._client.get_iopub_msg(timeout=0.2)
                except queue.Empty:
                    if not manager.is_alive():
                        result.died = True
                        result.notes.append(f"[The Python kernel died while running this cell ({self._death_reason()}"
                                            "). It will restart on the next call; earlier variables are gone.]")
                        self._stop()
                        return
                    continue
                if message.get("parent_header", {}).get("msg_id") != msg_id:
                    collector.skip()  # another request's (an interrupted cell's, or forged): never mixed in
                    continue
                if collector.add(message):
                    # A cell's processes end with it (a cell that returns at once could leave a busy one behind).
                    if self._end_cell_processes(manager):
                        result.notes.append("[The processes the cell left running were ended: a cell's processes "
                                            "end with it.]")
                    return
        finally:
            with self._cell_state:
                self._running_msg = None
