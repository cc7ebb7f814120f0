"""Starts bubblewrap for a kernel. Run as a script by the kernel spec (app/tools/sandbox/isolation.py builds it; never
imported by the app): `python enter.py bwrap ARGS...`.

bubblewrap takes its seccomp filter as an open descriptor (`--seccomp FD`), and the kernel spec can only name files:
every `--seccomp PATH` in the command line (the outer bubblewrap's, or the nested one's when the app runs as root)
becomes `--seccomp FD` here, the file opened from a folder that only the app can read. The descriptor is inherited
through the outer sandbox by the bubblewrap that uses it.
"""

from __future__ import annotations

import os
import sys


def prepared(argv: list[str]) -> list[str]:
    """The command line with each `--seccomp PATH` turned into `--seccomp FD` (an inheritable descriptor)."""
    args = list(argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "--seccomp":
            fd = os.open(args[i + 1], os.O_RDONLY)
            os.set_inheritable(fd, True)
            args[i + 1] = str(fd)
    return args


def main(argv: list[str]) -> None:
    command = prepared(argv)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
