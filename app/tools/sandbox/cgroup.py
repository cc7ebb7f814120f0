"""A control group that caps the memory of a whole sandbox (every process in it together, its tmpfs included), its
number of processes and its CPU time (in cores, where the cpu controller is available), where the app may make one:
it runs as root, or has been delegated a cgroup v2 subtree.

Resource limits (setrlimit) only bound each process: 256 processes of 2 GB each would still take the machine.
Where no cgroup can be made, those per-process limits are all there is, and `SandboxCgroup.make` says so by
returning None.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

_ROOT = Path("/sys/fs/cgroup")
_CPU_PERIOD_US = 100_000


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy: {"memory": "/a/b", "pids": ..., "": "/c"} ("" is cgroup v2)."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


class SandboxCgroup:
    """One sandbox's cgroup (v1 memory + pids (+ cpu) hierarchies, or one v2 group). `join_command` is the prefix
    that moves the sandbox's launcher into it before anything inside can fork."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @classmethod
    def make(cls, name: str, memory_mb: int, processes: int, cpus: float = 0.0) -> SandboxCgroup | None:
        """The group, or None where none can be made. The CPU limit (`cpus` cores, 0 for none) is applied where the
        cpu controller is there; without it the memory and process caps still hold."""
        own = _own_cgroups()
        quota = f"{max(1000, int(cpus * _CPU_PERIOD_US))} {_CPU_PERIOD_US}" if cpus > 0 else ""
        try:
            if (_ROOT / "cgroup.controllers").is_file():  # v2: one hierarchy, delegated to us or not at all
                group = _ROOT / own.get("", "/").lstrip("/") / name
                group.mkdir()
                (group / "memory.max").write_text(str(memory_mb * 1024 * 1024))
                if (group / "memory.swap.max").exists():
                    (group / "memory.swap.max").write_text("0")
                (group / "pids.max").write_text(str(processes))
                if quota and (group / "cpu.max").exists():  # only when the parent enables the cpu controller
                    (group / "cpu.max").write_text(quota)
                return cls([group])
            memory = _ROOT / "memory" / own.get("memory", "/").lstrip("/") / name
            pids = _ROOT / "pids" / own.get("pids", "/").lstrip("/") / name
            memory.mkdir()
            (memory / "memory.limit_in_bytes").write_text(str(memory_mb * 1024 * 1024))
            pids.mkdir()
            (pids / "pids.max").write_text(str(processes))
            cpu = _v1_cpu_group(own, name, quota) if quota else None
            return cls([memory, pids, *([cpu] if cpu else [])])
        except OSError as exc:  # not root, not delegated, or a controller missing: per-process limits only
            log.debug("No cgroup for the sandbox: %s", exc)
            for folder in ("memory", "pids", "cpu"):
                _remove(_ROOT / folder / own.get(folder, "/").lstrip("/") / name)
            _remove(_ROOT / own.get("", "/").lstrip("/") / name)
            return None

    def cpu_limit(self) -> float | None:
        """The CPU limit in cores, as the kernel has it; None without one."""
        for folder in self.folders:
            try:
                if (folder / "cpu.max").exists():
                    quota, period = (folder / "cpu.max").read_text().split()
                else:
                    quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                    period = (folder / "cpu.cfs_period_us").read_text().strip()
            except (OSError, ValueError):
                continue
            if quota not in ("max", "-1"):
                return int(quota) / int(period)
        return None

    def join_command(self) -> list[str]:
        """`sh -c` that writes its own pid into every cgroup.procs, then becomes the given command."""
        writes = " && ".join(f"echo $$ > '{folder / 'cgroup.procs'}'" for folder in self.folders)
        return ["/bin/sh", "-c", f'{writes} && exec "$@"', "sandbox-cgroup"]

    def out_of_memory(self) -> bool:
        """Whether the kernel's out-of-memory killer acted inside this group."""
        for folder in self.folders:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    text = (folder / name).read_text()
                except OSError:
                    continue
                for line in text.splitlines():
                    key, _, value = line.partition(" ")
                    if key in ("oom_kill", "oom") and value.strip() not in ("", "0"):
                        return True
        return False

    def remove(self) -> None:
        for folder in self.folders:
            _remove(folder)


def _v1_cpu_group(own: dict[str, str], name: str, quota: str) -> Path | None:
    """A cgroup v1 cpu group with the CFS quota; None (with the reason logged) where the cpu hierarchy is missing."""
    group = _ROOT / "cpu" / own.get("cpu", "/").lstrip("/") / name
    limit, period = quota.split()
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(period)
        (group / "cpu.cfs_quota_us").write_text(limit)
    except OSError as exc:
        log.info("No CPU limit for the sandbox: %s", exc)
        _remove(group)
        return None
    return group


def _remove(folder: Path) -> None:
    """rmdir a cgroup, waiting briefly for its killed processes to be gone."""
    for _ in range(20):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    log.warning("Could not remove the cgroup %s", folder)


def cgroups_possible() -> bool:
    """Cheap check for the UI: may this process make cgroups at all (root, or a writable v2 subtree)."""
    own = _own_cgroups()
    if (_ROOT / "cgroup.controllers").is_file():
        return os.access(_ROOT / own.get("", "/").lstrip("/"), os.W_OK)
    return os.access(_ROOT / "memory" / own.get("memory", "/").lstrip("/"), os.W_OK)
