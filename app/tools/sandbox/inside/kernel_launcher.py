"""Starts an IPython kernel under resource limits. Run as a script by the session's kernel spec (app/tools/sandbox/
isolation.py builds it), inside bubblewrap unless isolation is off; never imported by the app:
`python kernel_launcher.py --startup <startup file> -f <connection file>`.

When the app runs as root it is first run as `kernel_launcher.py --as-user UID -- COMMAND...`: it switches to that
unprivileged user (no capability survives) and runs COMMAND, a nested bubblewrap that gives the kernel a user
namespace of its own, without nested ones, and the seccomp filter (the outer bubblewrap, run by root, cannot).

Its settings come from DEMO_SANDBOX_* variables, removed before user code runs:
- DEMO_SANDBOX_MEMORY_MB / CPU_S / FILE_MB / PROCESSES: address space, CPU seconds, file size and process limits.
`no_new_privs` is set, so no set-user-id program can give the code back the privileges it dropped.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys

_LIMITS = {
    "DEMO_SANDBOX_MEMORY_MB": (resource.RLIMIT_AS, 1024 * 1024),
    "DEMO_SANDBOX_CPU_S": (resource.RLIMIT_CPU, 1),
    "DEMO_SANDBOX_FILE_MB": (resource.RLIMIT_FSIZE, 1024 * 1024),
    "DEMO_SANDBOX_PROCESSES": (resource.RLIMIT_NPROC, 1),
}
_PR_SET_NO_NEW_PRIVS = 38


def drop_privileges() -> None:
    if sys.platform.startswith("linux"):
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def run_as_user(uid: int, command: list[str]) -> None:
    """Become `uid` for good, then run `command` in place of this process."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise SystemExit("the sandbox could not drop root")
    drop_privileges()
    prepare_home()  # as the user: the kernel writes there; and the nested bubblewrap mounts its own tmpfs on /tmp
    os.execv(command[0], command)


def apply_limits() -> None:
    for variable, (limit, unit) in _LIMITS.items():
        value = os.environ.pop(variable, "")
        if value.strip() and int(value) > 0:
            amount = int(value) * unit
            _soft, hard = resource.getrlimit(limit)
            if hard != resource.RLIM_INFINITY:
                amount = min(amount, hard)
            resource.setrlimit(limit, (amount, amount if limit != resource.RLIMIT_CPU else amount + 5))


def prepare_home() -> None:
    for variable in ("TMPDIR", "MPLCONFIGDIR"):
        if os.environ.get(variable):
            os.makedirs(os.environ[variable], exist_ok=True)


def main(argv: list[str]) -> None:
    if len(argv) > 2 and argv[1] == "--as-user":
        run_as_user(int(argv[2]), argv[argv.index("--") + 1:])
    drop_privileges()
    apply_limits()
    prepare_home()
    # ipykernel would poll JPY_PARENT_PID and quit: inside a PID namespace its parent is never that process.
    os.environ.pop("JPY_PARENT_PID", None)
    startup = argv[argv.index("--startup") + 1]
    connection = argv[argv.index("-f") + 1]
    sys.path = [p for p in sys.path if p and os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
    from ipykernel import kernelapp

    # parent_handle=1: no parent poller and no console banner (the app, not a terminal, is this kernel's client).
    sys.argv = [sys.argv[0], "-f", connection, f"--IPKernelApp.exec_files={startup}", "--IPKernelApp.parent_handle=1"]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv)
