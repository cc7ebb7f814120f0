"""Gives a bubblewrap sandbox the network without the host's loopback. Run as a script by the kernel spec when
DEMO_KERNEL_NETWORK is on (never imported by the app): `python network.py [LAUNCHER...] bwrap ARGS...`
(the launcher that starts bubblewrap, enter.py, may come first).

bubblewrap makes the sandbox's own network namespace and reports its first process (--info-fd); slirp4netns then
connects that namespace to the outside through a user-space TCP/IP stack, with --disable-host-loopback so that
127.0.0.1 of the host (where the app and its API listen) stays out of reach. Both die with this script, which the
app kills to stop the kernel.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _sandbox_pid(info_fd: int) -> int:
    data = b""
    while b"}" not in data:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            raise SystemExit("bubblewrap ended before it reported its sandbox")
        data += chunk
    return int(json.loads(data[: data.index(b"}") + 1])["child-pid"])


def main(argv: list[str]) -> int:
    read_end, write_end = os.pipe()
    at = next(i for i, arg in enumerate(argv) if os.path.basename(arg) == "bwrap") + 1
    sandbox = subprocess.Popen([*argv[:at], "--info-fd", str(write_end), *argv[at:]], pass_fds=(write_end,),
                               preexec_fn=_die_with_parent)
    os.close(write_end)
    pid = _sandbox_pid(read_end)
    subprocess.Popen(["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", str(pid), "tap0"],
                     stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    return sandbox.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
