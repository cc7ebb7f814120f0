"""The Python tool's kernel: a real ipykernel under resource limits, one per session."""

from __future__ import annotations

import os
import time

import pytest

from app.tools.sandbox.kernel import KernelSession, SandboxLimits
from app.tools.session import SessionTools


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    session = KernelSession(tmp_path_factory.mktemp("kernel"), SandboxLimits(cell_timeout_s=3, memory_mb=1500))
    yield session
    session.shutdown()


def test_prints_results_errors_and_plots_come_back_in_order(kernel):
    result = kernel.execute(
        "import sys, matplotlib.pyplot as plt\n"
        "print('first')\n"
        "print('to stderr', file=sys.stderr)\n"
        "plt.plot([1, 2, 3]); plt.show()\n"
        "print('after the plot')\n"
        "6 * 7"
    )
    kinds = [o.kind for o in result.outputs]
    assert kinds == ["text", "image", "text", "text"]
    assert result.outputs[0].text == "first\nto stderr\n"
    assert result.outputs[1].image.startswith(b"\x89PNG")
    assert result.outputs[2].text == "after the plot\n" and result.outputs[3].text == "42\n"
    assert result.text() == "first\nto stderr\n[Figure 1 was displayed to the user.]\nafter the plot\n42"
    assert result.ok


def test_an_exception_is_reported_without_terminal_colours(kernel):
    result = kernel.execute("1 / 0")
    assert not result.ok and "ZeroDivisionError: division by zero" in result.text() and "\x1b[" not in result.text()


def test_a_cell_that_runs_too_long_is_interrupted_and_the_next_cell_is_clean(kernel):
    kernel.execute("counter = 0")
    started = time.monotonic()
    slow = kernel.execute("import time\nfor i in range(1000):\n    print('tick', i, flush=True)\n    time.sleep(0.2)")
    assert slow.timed_out and "KeyboardInterrupt" in slow.text() and "ran longer than 3 s" in slow.text()
    assert time.monotonic() - started < 15
    time.sleep(0.5)  # any late output of the interrupted cell arrives now, and must not reach the next one
    clean = kernel.execute("counter += 1\nprint('counter', counter)")
    assert clean.text() == "counter 1"


def test_the_memory_limit_raises_memory_error_inside_the_kernel(kernel):
    result = kernel.execute("block = bytearray(8 * 1024 ** 3)")
    assert "MemoryError" in result.text()
    assert kernel.execute("print('still alive')").text() == "still alive"


def test_the_environment_is_scrubbed_and_the_folder_is_private(kernel):
    assert os.environ.get("HF_HUB_OFFLINE")  # the app's environment has variables the kernel must not inherit
    result = kernel.execute("import os\nprint(os.getcwd())\nprint('HF_HUB_OFFLINE' in os.environ)")
    cwd, leaked = result.text().splitlines()
    assert cwd == kernel.working_folder and leaked == "False"


def test_a_dead_kernel_is_restarted_with_a_clear_note(tmp_path):
    session = KernelSession(tmp_path / "k", SandboxLimits(cell_timeout_s=5))
    try:
        session.execute("x = 1")
        died = session.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert "kernel died" in died.text() and not died.ok
        assert "earlier variables are gone" in died.text()
        assert session.execute("print('x' in globals())").text() == "False"  # a fresh kernel answers
    finally:
        session.shutdown()


def test_two_sessions_do_not_share_variables_or_folders():
    first, second = SessionTools(), SessionTools()
    try:
        first.kernel.execute("secret = 'only mine'")
        assert "NameError" in second.kernel.execute("print(secret)").text()
        assert first.folder != second.folder
        first.save_upload("data.csv", b"a,b\n1,2\n")
        assert (first.folder / "uploads" / "data.csv").is_file()
        assert not (second.folder / "uploads" / "data.csv").exists()
        found = first.kernel.execute("print(open('data.csv').read().splitlines()[1])").text()
        assert found == "1,2"
    finally:
        first.close()
        second.close()
    assert not first.folder.exists()


def _wait_until_the_cell_runs(tools: SessionTools) -> None:
    deadline = time.monotonic() + 60
    while tools.kernel._running_msg is None:
        assert time.monotonic() < deadline, "the cell was never sent to the kernel"
        time.sleep(0.02)


def test_stop_interrupts_the_running_cell(tmp_path):
    tools = SessionTools(SandboxLimits(cell_timeout_s=60))
    try:
        registry = tools.registry()
        assert tools.kernel.execute("1").ok  # started: the Stop below must find the cell running
        running = registry.start("python", {"code": "import time\ntime.sleep(50)"})
        _wait_until_the_cell_runs(tools)
        time.sleep(0.5)  # inside time.sleep
        started = time.monotonic()
        result = running.cancel()  # what the Stop button does
        assert "stopped" in result.content
        # the kernel was interrupted, so it is free again at once
        assert tools.kernel.execute("print('free')").text() == "free" and time.monotonic() - started < 10
    finally:
        tools.close()


def test_stop_while_the_kernel_starts_means_the_cell_never_runs(tmp_path):
    """A first call starts the kernel (seconds): a Stop then must not be lost, leaving the cell to run its full time
    and hold the kernel from the next call."""
    tools = SessionTools(SandboxLimits(cell_timeout_s=60))
    try:
        running = tools.registry().start("python", {"code": "open('ran.txt', 'w').write('x')\nimport time\n"
                                                            "time.sleep(50)"})
        deadline = time.monotonic() + 30
        while not tools.kernel._in_execute:  # the call is in the kernel, which is starting
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert tools.kernel._running_msg is None, "the kernel started too quickly for this test to mean anything"
        assert "stopped" in running.cancel().content
        started = time.monotonic()
        answer = tools.kernel.execute("import os\nprint(os.path.exists('ran.txt'))")
        assert answer.text() == "False" and time.monotonic() - started < 30
        # and a Stop that comes when no call is in the kernel skips nothing later
        tools.kernel.interrupt()
        assert tools.kernel.execute("print(6 * 7)").text() == "42"
    finally:
        tools.close()


def test_closing_a_session_stops_its_kernel():
    tools = SessionTools()
    tools.kernel.execute("pid = 1")
    manager = tools.kernel._manager
    assert manager is not None and manager.is_alive()
    tools.close()
    assert not manager.is_alive()

