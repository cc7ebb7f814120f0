"""The Python tool's sandbox, attacked through the real kernel the way a prompt-injected model would: every cell here
is code a model could write. Each test is one finding of issue 12's probe, which all succeeded before bubblewrap."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

import pytest

from app.config import SandboxLimits, cache_dir
from app.tools.documents import DocumentError
from app.tools.sandbox import isolation
from app.tools.sandbox.cgroup import cgroups_possible
from app.tools.session import SessionTools, safe_upload_name
from harness.local_http import json_reply, serve
from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap exists on Linux only")

LIMITS = SandboxLimits(cell_timeout_s=20, processes=32, disk_mb=64, output_chars=5_000)


@pytest.fixture(scope="module")
def two_sessions():
    first, second = SessionTools(LIMITS), SessionTools(LIMITS)
    yield first, second
    first.close()
    second.close()


def run(tools: SessionTools, code: str) -> str:
    return tools.kernel.execute(code).text()


def test_the_app_s_environment_and_processes_are_out_of_sight(two_sessions, monkeypatch):
    first, _ = two_sessions
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-app")
    first.kernel.restart()  # started after the app got the secret
    seen = run(first, "import os\n"
                      "found = []\n"
                      "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                      "    for part in ('environ', 'cmdline'):\n"
                      "        try: found.append(open(f'/proc/{pid}/{part}', 'rb').read().decode(errors='replace'))\n"
                      "        except OSError: pass\n"
                      "text = '\\n'.join(found)\n"
                      "print(len(found) > 0, 'sk-secret' in text, 'pytest' in text, 'streamlit' in text)\n"
                      "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit())[:2])")
    flags, pids = seen.splitlines()
    assert flags == "True False False False"
    assert pids == "[1, 2]"  # its own PID namespace: bubblewrap's init and the kernel


def test_killing_every_process_it_can_see_does_not_touch_the_app(two_sessions):
    first, second = two_sessions
    died = first.kernel.execute("import os\n"
                                "for pid in sorted(filter(str.isdigit, os.listdir('/proc')), key=int, reverse=True):\n"
                                "    try: os.kill(int(pid), 9)\n"
                                "    except OSError as e: print(pid, e.strerror)\n"
                                "os.kill(os.getppid(), 9)")
    assert not died.ok
    assert os.getpid() > 0 and run(second, "print('second still here')") == "second still here"
    assert run(first, "print('restarted')").endswith("restarted")


def test_a_session_cannot_reach_another_session_s_kernel_or_files(two_sessions):
    first, second = two_sessions
    second.save_upload("secret.txt", b"B's secret")
    run(second, "b_variable = 'B'")
    other_run, other_uploads = second.kernel.layout.run, second.kernel.layout.uploads
    probe = run(first, "import os\n"
                       f"print(os.path.exists({str(other_run)!r}), os.path.exists({str(other_uploads)!r}))\n"
                       f"print(os.listdir({str(second.folder.parent)!r}) == [{first.folder.name!r}])\n"
                       "print(open('../uploads/secret.txt').read() if os.path.exists('../uploads/secret.txt') else "
                       "'no ..')\n"
                       "print(sorted(os.listdir('uploads')))")
    assert probe.splitlines() == ["False False", "True", "no ..", "[]"]
    assert run(second, "print(open('secret.txt').read(), b_variable)") == "B's secret B"


def test_the_app_s_files_and_the_host_are_read_only_or_absent(two_sessions):
    first, _ = two_sessions
    assert cache_dir().is_dir()  # the app's models and settings
    probe = run(first, "import os\n"
                       f"print(os.path.exists({str(ROOT / 'app')!r}), os.path.exists({str(cache_dir())!r}))\n"
                       "for path in ('/usr/evil', '/etc/evil', '/tmp/evil', '/evil', 'uploads/evil'):\n"
                       "    try: open(path, 'w'); print('wrote', path)\n"
                       "    except OSError as e: print(e.strerror)\n"
                       "status = open('/proc/self/status').read()\n"
                       "print(os.getuid() != 0, 'NoNewPrivs:\\t1' in status, 'CapEff:\\t0000000000000000' in status)")
    assert probe.splitlines() == ["False False", *["Read-only file system"] * 5, "True True True"]


def test_no_network_not_even_the_app_s_own_ports(two_sessions):
    first, _ = two_sessions
    with serve({"/v1/models": lambda handler, body: json_reply({"data": []})}) as url:
        probe = run(first, "import socket, urllib.request\n"
                           f"try: urllib.request.urlopen({url + '/v1/models'!r}, timeout=3); print('reached')\n"
                           "except OSError as e: print('refused')\n"
                           "try: socket.create_connection(('1.1.1.1', 53), timeout=3); print('internet')\n"
                           "except OSError as e: print(e.strerror)")
    assert probe.splitlines() == ["refused", "Network is unreachable"]


def test_a_fork_bomb_stops_at_the_process_limit(two_sessions):
    first, _ = two_sessions
    probe = run(first, "import os, time\n"
                       "started = 0\n"
                       "for _ in range(400):\n"
                       "    try: pid = os.fork()\n"
                       "    except OSError: break\n"
                       "    if pid == 0:\n"
                       "        time.sleep(2); os._exit(0)\n"
                       "    started += 1\n"
                       "print(started)\n"
                       "for _ in range(started): os.wait()  # the limit is free again for the next test")
    started = int(probe.splitlines()[-1])
    assert 0 < started < LIMITS.processes


def test_the_disk_limit_holds_across_files(two_sessions):
    first, _ = two_sessions
    probe = run(first, "chunk = b'x' * (1024 * 1024)\n"
                       "written = 0\n"
                       "try:\n"
                       "    for name in ('a.bin', 'b.bin', 'c.bin'):\n"
                       "        with open(name, 'wb') as f:\n"
                       "            for _ in range(40): f.write(chunk); written += 1\n"
                       "except OSError as e: print(e.strerror)\n"
                       "print(written)\n"
                       "import os\n"
                       "for name in ('a.bin', 'b.bin', 'c.bin'):\n"
                       "    if os.path.exists(name): os.remove(name)")
    error, written = probe.splitlines()
    assert error == "No space left on device" and int(written) < LIMITS.disk_mb


def test_every_process_it_started_ends_with_the_session():
    """Closed while a cell still runs (a cell's processes end with the cell anyway:
    tests/engines/test_sandbox_limits.py)."""
    marker = f"{uuid.uuid4().int % 10**6}.25"
    tools = SessionTools(LIMITS)

    def survivors() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    if marker.encode() in file.read():
                        found.append(pid)
            except OSError:
                pass
        return found

    def cell() -> None:
        try:
            run(tools, f"import subprocess, sys, time\n"
                       f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({marker})'], "
                       "start_new_session=True)\n"
                       "time.sleep(15)")
        except Exception:  # the session is closed under it: how the cell ends does not matter
            pass

    running = threading.Thread(target=cell)
    running.start()
    deadline = time.monotonic() + 30
    while not survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors()  # the background process runs while its cell does
    tools.close()
    deadline = time.monotonic() + 5
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors() == []
    running.join(30)


def test_a_huge_print_is_cut_in_the_kernel_and_again_in_the_app(two_sessions):
    first, _ = two_sessions
    result = first.kernel.execute("print('x' * 100_000_000)")
    assert len(result.text()) < LIMITS.output_chars + 200 and "Output cut" in result.text()
    # Code can undo the kernel's cap; the app still keeps no more than the limit (plus room for the kernel's note).
    undone = first.kernel.execute("import sys\n"
                                  "for stream in (sys.stdout, sys.stderr): del stream.write\n"
                                  "print('y' * 2_000_000)")
    assert len(undone.text()) < LIMITS.output_chars + 1200 and "Output cut" in undone.text()


@pytest.mark.parametrize("name, expected", [
    ("..", "upload"), (".", "upload"), ("/", "upload"), ("../../etc/passwd", "passwd"), ("a\\..\\b.csv", "b.csv"),
    (".bashrc", "bashrc"), ("x" * 300 + ".csv", "x" * 96 + ".csv"), ("rép ort (1).pdf", "rép ort (1).pdf"),
    ("a\x00b\nc.txt", "a_b_c.txt"),
])
def test_upload_names_are_made_safe(name, expected):
    assert safe_upload_name(name) == expected


def test_uploads_never_follow_a_link_or_overwrite_another_file(tmp_path):
    tools = SessionTools(SandboxLimits(isolation="none", disk_mb=1))
    try:
        uploads = tools.kernel.layout.uploads
        outside = tmp_path / "outside.txt"
        outside.write_text("untouched")
        (uploads / "notes.txt").symlink_to(outside)  # what a kernel without bubblewrap could leave there
        saved = tools.save_upload("notes.txt", b"new")
        assert saved.name == "notes (2).txt" and saved.read_bytes() == b"new"
        assert outside.read_text() == "untouched"
        assert tools.save_upload("notes.txt", b"new") == saved  # the same file again is not stored twice
        for name in ("..", ".", "/", "x" * 300):
            assert tools.save_upload(name, b"1").parent == uploads
        with pytest.raises(DocumentError, match="would exceed 1 MB"):
            tools.save_upload("big.bin", b"x" * 2 * 1024 * 1024)
    finally:
        tools.close()


def test_without_bubblewrap_the_python_tool_is_refused_with_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    isolation._bubblewrap_works.cache_clear()
    try:
        tools = SessionTools(SandboxLimits())
        assert "python" not in tools.registry().names
        assert "apt-get install bubblewrap" in tools.python_unavailable
        assert "DEMO_KERNEL_ISOLATION=none" in tools.python_unavailable
        tools.close()
        opted_out = SessionTools(SandboxLimits(isolation="none"))
        assert "python" in opted_out.registry().names and opted_out.python_unavailable == ""
        opted_out.close()
    finally:
        isolation._bubblewrap_works.cache_clear()


def test_resource_limits_only_mode_still_runs_code_and_says_so():
    tools = SessionTools(SandboxLimits(isolation="none", cell_timeout_s=20))
    try:
        tools.save_upload("data.csv", b"a,b\n1,2\n")
        probe = run(tools, "import os\nprint(os.getcwd())\nprint(open('data.csv').read().splitlines()[1])")
        assert probe.splitlines() == [str(tools.kernel.layout.work), "1,2"]
        assert "resource limits only" in isolation.describe(tools.kernel.limits)
    finally:
        tools.close()


def test_with_the_network_switch_on_the_host_s_loopback_stays_out_of_reach():
    tools = SessionTools(SandboxLimits(network=True, cell_timeout_s=20))
    try:
        with serve({"/v1/models": lambda handler, body: json_reply({"data": []})}) as url:
            port = url.rsplit(":", 1)[1]
            probe = run(tools, "import socket, time, urllib.request\n"
                               "for _ in range(50):  # slirp4netns brings the interface up just after the start\n"
                               "    if any(name == 'tap0' for _, name in socket.if_nameindex()): break\n"
                               "    time.sleep(0.1)\n"
                               "print(sorted(name for _, name in socket.if_nameindex()))\n"
                               f"for host in ('127.0.0.1', '10.0.2.2'):  # the app's loopback, and slirp's door to it\n"
                               f"    try: urllib.request.urlopen(f'http://{{host}}:{port}/v1/models', timeout=3); "
                               "print('reached')\n"
                               "    except OSError as e: print('refused')")
        assert probe.splitlines() == ["['lo', 'tap0']", "refused", "refused"]
        assert "not this machine's loopback" in isolation.describe(tools.kernel.limits)
    finally:
        tools.close()


@pytest.mark.skipif(not cgroups_possible(), reason="this process may not make cgroups (not root, nothing delegated)")
def test_the_memory_of_all_its_processes_together_is_capped():
    # Each child stays far below the per-process limit; together they are twice the sandbox's total.
    tools = SessionTools(SandboxLimits(total_memory_mb=300, memory_mb=1024, cell_timeout_s=30))
    try:
        probe = run(tools, "import os, signal, time\n"
                           "children = []\n"
                           "for _ in range(4):\n"
                           "    pid = os.fork()\n"
                           "    if pid == 0:\n"
                           "        block = bytearray(150 * 1024 * 1024)\n"
                           "        for i in range(0, len(block), 4096): block[i] = 1\n"
                           "        time.sleep(3); os._exit(0)\n"
                           "    children.append(pid)\n"
                           "print(sum(os.waitpid(pid, 0)[1] == signal.SIGKILL for pid in children))")
        assert int(probe.splitlines()[-1]) >= 1  # the out-of-memory killer acted inside the sandbox
        assert tools.kernel._cgroup is not None and tools.kernel._cgroup.out_of_memory()
        assert "300 MB of memory in all" in isolation.describe(tools.kernel.limits)
        assert run(tools, "print('the kernel is fine')") == "the kernel is fine"
    finally:
        tools.close()
    assert tools.kernel._cgroup is None  # removed with the kernel
