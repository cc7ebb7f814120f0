"""Starts an IPython kernel under resource limits. Run as a script by the kernel spec that app/tools/kernel.py
writes, never imported by the app: `python sandbox_kernel.py -f <connection file>`.

Limits come from DEMO_SANDBOX_* variables (removed before user code runs): address space (so a huge allocation
raises MemoryError inside the kernel), CPU seconds, file size, and number of processes (not enforced by Linux for
root). The kernel starts in its session folder with the environment the app chose for it.
"""

from __future__ import annotations

import os
import resource
import sys

_LIMITS = {
    "DEMO_SANDBOX_MEMORY_MB": (resource.RLIMIT_AS, 1024 * 1024),
    "DEMO_SANDBOX_CPU_S": (resource.RLIMIT_CPU, 1),
    "DEMO_SANDBOX_FILE_MB": (resource.RLIMIT_FSIZE, 1024 * 1024),
    "DEMO_SANDBOX_PROCESSES": (resource.RLIMIT_NPROC, 1),
}


def apply_limits() -> None:
    for variable, (limit, unit) in _LIMITS.items():
        value = os.environ.pop(variable, "")
        if value.strip() and int(value) > 0:
            amount = int(value) * unit
            _soft, hard = resource.getrlimit(limit)
            if hard != resource.RLIM_INFINITY:
                amount = min(amount, hard)
            resource.setrlimit(limit, (amount, amount if limit != resource.RLIMIT_CPU else amount + 5))


if __name__ == "__main__":
    apply_limits()
    sys.path = [p for p in sys.path if p and os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
