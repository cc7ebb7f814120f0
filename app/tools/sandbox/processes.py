"""Ends the processes a cell started (subprocesses, daemons, forks) while the kernel itself goes on.

They are found from the host's /proc, so nothing inside the sandbox can hide them or refuse: every descendant of
the kernel's launcher that lives in the sandbox's PID namespace, except the sandbox's own first processes, which
start in a fixed order (bubblewrap's init, under root a nested bubblewrap, then the kernel: see
sandbox.kernel_pids_inside); processes that left their parent were adopted by that init, so they are still
descendants. Without bubblewrap (isolation "none") the kernel is the launcher itself and every descendant is the
cell's.
"""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path

_PROC = Path("/proc")
_ROUNDS = 5  # processes may fork while they are being killed: look again until none is left


def _children() -> dict[int, list[int]]:
    """Every live process's children (zombies, already dead and waiting for their parent, left out)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # "pid (command) state ppid ...": the command may contain spaces and parentheses.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            children[int(ppid)].append(int(entry.name))
    return children


def _namespace_pids(pid: int) -> list[int]:
    """The process's PID in each PID namespace it is in, outermost first (NSpid)."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(n) for n in line.split()[1:]]
    except OSError:
        pass
    return []


def cell_processes(launcher: int, kept_inside: tuple[int, ...] | None) -> list[int]:
    """The host PIDs of the processes the cell started (see the module's docstring): `kept_inside` are the PIDs,
    inside the sandbox, of the processes that make it and the kernel; None without a sandbox."""
    children = _children()
    depth = len(_namespace_pids(launcher))
    found: list[int] = []
    pending = list(children.get(launcher, []))
    while pending:
        pid = pending.pop()
        pending += children.get(pid, [])
        if kept_inside is None:
            found.append(pid)
            continue
        pids = _namespace_pids(pid)
        if len(pids) > depth and pids[-1] not in kept_inside:
            found.append(pid)
    return found


def kill_cell_processes(launcher: int, kept_inside: tuple[int, ...] | None) -> int:
    """SIGKILL the processes the cell started; how many were killed."""
    killed = 0
    for _ in range(_ROUNDS):
        targets = cell_processes(launcher, kept_inside)
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:  # ended meanwhile
                pass
        time.sleep(0.05)
    return killed
