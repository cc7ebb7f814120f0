"""How a session's Python kernel is isolated: the command line that starts it, and whether isolation can be had.

With bubblewrap (Linux, the default) the kernel runs in new PID, IPC, UTS, mount and network namespaces:
- it sees only the system's read-only folders (/usr, /etc...), the Python installation, its own filesystem of
  `disk_mb` (its working folder and /tmp), the session's uploads read-only, and the folder of its Unix sockets;
  the app's files, other sessions and the host's processes (/proc) are not there;
- its network namespace has no interface but its own loopback, so neither the internet nor the app's ports on
  127.0.0.1 can be reached; with `network` on, slirp4netns connects it to the outside, still without the host's
  loopback;
- it runs as an unprivileged user in a user namespace of its own, where it cannot make nested ones: when the app
  runs as root, as a user id of its own per session (so the process limit counts this session only; a nested
  bubblewrap, started as that user, makes the namespace), otherwise as the app's user;
- a seccomp filter (app/tools/sandbox/seccomp.py) denies the system calls that widen the kernel's attack surface
  (namespaces, mounts, keyrings, io_uring, bpf, ptrace...);
- it dies with the app, and killing its launcher kills every process inside (they share its PID namespace).
With `isolation == "none"` (macOS, or an explicit opt-out) only the resource limits apply.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from app.config import SandboxLimits
from app.tools.sandbox.cgroup import SandboxCgroup, cgroups_possible
from app.tools.sandbox.seccomp import SeccompUnavailable, filter_bpf, write_filter

# Inside the sandbox: where the kernel works, and where the two scripts that start it are mounted.
SANDBOX_HOME = "/home/sandbox"
SANDBOX_SCRIPTS = "/opt/composite-demo"
_HERE = Path(__file__).parent
# Scripts, never imported by the app. inside/ runs in the sandbox; launchers/ starts it, on the host.
LAUNCHER = _HERE / "inside" / "kernel_launcher.py"  # applies the limits, then starts ipykernel
STARTUP = _HERE / "inside" / "startup.py"  # runs inside the kernel before the first cell
NETWORK_LAUNCHER = _HERE / "launchers" / "network.py"  # connects the sandbox to the network (DEMO_KERNEL_NETWORK)
ENTER = _HERE / "launchers" / "enter.py"  # starts bubblewrap with its seccomp filter as a descriptor
# Read-only system folders the kernel needs (libraries, certificates, time zones, fonts).
_SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc")
# User ids given to sandboxes when the app runs as root: a range no distribution hands out to people.
_ROOT_MODE_UIDS = (200_000, 100_000)


class SandboxUnavailable(RuntimeError):
    """Isolation was asked for and cannot be had here; the message says what to install or set."""


@dataclass(frozen=True)
class SessionLayout:
    """A session's folder on the host: uploads (read-only inside), the kernel's sockets, its kernel spec, and
    (without bubblewrap only) the working folder itself."""

    folder: Path

    @property
    def uploads(self) -> Path:
        return self.folder / "uploads"

    @property
    def run(self) -> Path:
        return self.folder / "run"

    @property
    def specs(self) -> Path:
        return self.folder / "spec"

    @property
    def work(self) -> Path:
        return self.folder / "work"

    @property
    def seccomp(self) -> Path:
        """The sandbox's seccomp filter (in the spec folder, which the sandbox never sees)."""
        return self.specs / "seccomp.bpf"

    def create(self) -> None:
        for path in (self.folder, self.uploads, self.run, self.specs, self.work):
            path.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)


def sandbox_uid(layout: SessionLayout) -> int | None:
    """The user id a root app gives this session's kernel; None when the app is not root (then the kernel runs as
    the app's own user inside a user namespace, where Linux already counts its processes separately)."""
    if os.geteuid() != 0:
        return None
    start, size = _ROOT_MODE_UIDS
    return start + zlib.crc32(str(layout.folder).encode()) % size


def _python_folders() -> list[str]:
    """The Python installation the kernel runs from (the virtual environment and the interpreter it points to),
    without folders that are already mounted as system folders."""
    folders = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    folders.add(os.path.dirname(os.path.realpath(sys.executable)))
    kept: list[str] = []
    for folder in sorted(folders):
        if folder == "/" or any(folder == s or folder.startswith(s + "/") for s in _SYSTEM_FOLDERS):
            continue
        if not any(folder.startswith(k + "/") for k in kept):
            kept.append(folder)
    return kept


def _parents(target: str) -> list[str]:
    """Folders leading to a mount point, made world-readable: bubblewrap run by root would make them 0700, and
    the kernel's own user could then not reach what is mounted below."""
    args: list[str] = []
    for parent in reversed(Path(target).parents[:-1]):  # without "/"
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _bind(source: str | Path, target: str | Path, writable: bool = False) -> list[str]:
    return [*_parents(str(target)), "--bind" if writable else "--ro-bind", str(source), str(target)]


def _system_mounts() -> list[str]:
    args: list[str] = []
    for folder in _SYSTEM_FOLDERS:
        if os.path.islink(folder):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for folder in _python_folders():
        args += _bind(folder, folder)
    return args


# A user namespace of its own, where the kernel's user is an ordinary user that cannot make nested ones.
_OWN_USER = ["--unshare-user", "--disable-userns", "--uid", "1000", "--gid", "1000"]


def _namespaces(as_root: bool) -> list[str]:
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent", "--new-session"]
    if not as_root:
        return [*_OWN_USER, *args]
    # bubblewrap run by root can only map root into a user namespace: here the launcher inside switches to the
    # session's user id, and a nested bubblewrap run as that user makes the user namespace (see _user_stage).
    return [*args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def _user_stage(bwrap: str, uid: int, seccomp: Path) -> list[str]:
    """Root only: the launcher's arguments that switch to `uid`, then start the kernel in a nested bubblewrap that
    adds the user namespace and the seccomp filter (the outer one keeps everything else)."""
    return ["--as-user", str(uid), "--", bwrap, *_OWN_USER, "--dev-bind", "/", "/", "--die-with-parent",
            "--seccomp", str(seccomp), "--", sys.executable, f"{SANDBOX_SCRIPTS}/{LAUNCHER.name}"]


def _temporary_folder(layout: SessionLayout) -> list[str]:
    """/tmp as a link into the kernel's own filesystem, unless the sockets' folder already made /tmp a folder
    (then it stays read-only and TMPDIR, which Python's tempfile follows, points into the kernel's folder)."""
    if layout.run.resolve().is_relative_to("/tmp"):
        return []
    return ["--symlink", f"{SANDBOX_HOME}/.tmp", "/tmp"]


def bubblewrap_prefix(layout: SessionLayout, limits: SandboxLimits) -> list[str]:
    """The bubblewrap command line that wraps the kernel of this session (everything before the kernel's own)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(_INSTALL_HINT)
    as_root = sandbox_uid(layout) is not None
    return [
        bwrap,
        *_namespaces(as_root),
        # enter.py turns the path into a descriptor; under root the nested bubblewrap loads the filter.
        *(["--seccomp", str(layout.seccomp)] if not as_root else []),
        *_system_mounts(),
        "--proc", "/proc", "--dev", "/dev",
        # The same path inside and out, because the sockets are named by it (made before /tmp, which may hold it).
        *_bind(layout.run, layout.run, writable=True),
        # The kernel's whole writable world is one filesystem of disk_mb: that is the disk limit.
        *_parents(SANDBOX_HOME),
        "--perms", "0777", "--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", SANDBOX_HOME,
        *_temporary_folder(layout),
        "--ro-bind", str(layout.uploads), f"{SANDBOX_HOME}/uploads",
        *_bind(LAUNCHER, f"{SANDBOX_SCRIPTS}/{LAUNCHER.name}"),
        *_bind(STARTUP, f"{SANDBOX_SCRIPTS}/{STARTUP.name}"),
        # The folders bubblewrap made for the mounts live in an unlimited tmpfs the kernel's user may own.
        "--remount-ro", "/",
        "--chdir", SANDBOX_HOME,
        "--",
    ]


def kernel_argv(layout: SessionLayout, limits: SandboxLimits, cgroup: SandboxCgroup | None = None) -> list[str]:
    """The kernel spec's argv: ipykernel started by our launcher, inside bubblewrap unless isolation is off, in
    the sandbox's cgroup when there is one."""
    if limits.isolation == "none":
        return [sys.executable, str(LAUNCHER), "--startup", str(STARTUP), "-f", "{connection_file}"]
    scripts = SANDBOX_SCRIPTS
    join = cgroup.join_command() if cgroup is not None else []
    network = [sys.executable, str(NETWORK_LAUNCHER)] if limits.network else []
    write_filter(layout.seccomp)
    prefix = bubblewrap_prefix(layout, limits)
    uid = sandbox_uid(layout)
    user = _user_stage(prefix[0], uid, layout.seccomp) if uid is not None else []
    return [*join, *network, sys.executable, str(ENTER), *prefix, sys.executable, f"{scripts}/{LAUNCHER.name}",
            *user, "--startup", f"{scripts}/{STARTUP.name}", "-f", "{connection_file}"]


def kernel_pids_inside(layout: SessionLayout, limits: SandboxLimits) -> tuple[int, ...] | None:
    """The PIDs, in the sandbox's PID namespace, of bubblewrap's init, the nested bubblewrap (root only) and the
    kernel, which start in this order before any code runs; None without a sandbox."""
    if limits.isolation == "none":
        return None
    return (1, 2, 3) if sandbox_uid(layout) is not None else (1, 2)


def working_folder(layout: SessionLayout, limits: SandboxLimits) -> str:
    """The kernel's current folder as the kernel sees it."""
    return str(layout.work) if limits.isolation == "none" else SANDBOX_HOME


def uploads_folder(layout: SessionLayout, limits: SandboxLimits) -> str:
    """The uploads folder as the kernel sees it."""
    return str(layout.uploads) if limits.isolation == "none" else f"{SANDBOX_HOME}/uploads"


_INSTALL_HINT = (
    "The Python tool needs bubblewrap to isolate its code from this machine and it is not installed: install it "
    "(Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`; `make setup` does it "
    "when it can), or set DEMO_KERNEL_ISOLATION=none to run code with resource limits only (unsafe: the code can "
    "then read what the app's user can read and use the network)."
)


@functools.cache
def _bubblewrap_works(as_root: bool) -> str:
    """'' when a sandbox like the kernel's can be made here, else why not (bubblewrap's own message)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return _INSTALL_HINT
    try:
        filter_bpf()
    except SeccompUnavailable as exc:
        return str(exc)
    with tempfile.TemporaryDirectory(prefix="composite-demo-probe-") as folder:
        filter_file = Path(folder) / "seccomp.bpf"
        write_filter(filter_file)
        stage = ["--seccomp", str(filter_file), "--", sys.executable, "-c", "pass"]
        if as_root:  # the same two stages as a kernel's (see _user_stage); the nested one mounts on /tmp
            stage = ["--dir", "/tmp", "--", sys.executable, f"{SANDBOX_SCRIPTS}/{LAUNCHER.name}",
                     *_user_stage(bwrap, _ROOT_MODE_UIDS[0], filter_file)[:-2], sys.executable, "-c", "pass"]
        probe = [sys.executable, str(ENTER), bwrap, *_namespaces(as_root), *_system_mounts(), "--proc", "/proc",
                 "--dev", "/dev", *_bind(LAUNCHER, f"{SANDBOX_SCRIPTS}/{LAUNCHER.name}"), *stage]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap could not be run: {exc}"
    if done.returncode != 0:
        return (f"bubblewrap is installed but cannot make a sandbox here ({done.stderr.strip()[:300]}); user "
                "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces, "
                "or a container without them). Enable them, or set DEMO_KERNEL_ISOLATION=none to run code with "
                "resource limits only (unsafe).")
    return ""


def check_available(limits: SandboxLimits) -> None:
    """Raise SandboxUnavailable with what to do when the configured isolation cannot be had here."""
    if limits.isolation == "none":
        return
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable("bubblewrap isolation exists on Linux only: set DEMO_KERNEL_ISOLATION=none to run "
                                 "code with resource limits only.")
    problem = _bubblewrap_works(os.geteuid() == 0)
    if problem:
        raise SandboxUnavailable(problem)
    if limits.network and shutil.which("slirp4netns") is None:
        raise SandboxUnavailable("DEMO_KERNEL_NETWORK is on, and giving the sandbox the network without the host's "
                                 "loopback needs slirp4netns: install it (Debian/Ubuntu: `sudo apt-get install "
                                 "slirp4netns`; `make setup` does it when it can) or turn DEMO_KERNEL_NETWORK off.")


def describe(limits: SandboxLimits) -> str:
    """One line for the UI: what protects this machine from the code the model writes."""
    if limits.isolation == "none":
        return ("resource limits only (DEMO_KERNEL_ISOLATION=none): the code can read what the app's user can read "
                "and use the network")
    network = "no network" if not limits.network else "the network but not this machine's loopback"
    memory = (f"{limits.total_memory_mb} MB of memory in all" if cgroups_possible() else
              f"{limits.memory_mb} MB of memory a process (no cgroup could be made for a total)")
    return (f"a bubblewrap sandbox: its own processes, {network}, a {limits.disk_mb} MB folder, {memory}, the "
            "system read-only; the app's files and other sessions are out of sight")
