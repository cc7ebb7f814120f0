"""The seccomp filter bubblewrap loads into the sandbox (`--seccomp FD`): the system calls a Python kernel never needs
and that widen the kernel's attack surface fail with EPERM, so programs that try them fail cleanly.

Denied: new namespaces (unshare, setns, and clone with a namespace flag), mounting in every form, the kernel
keyrings, io_uring, bpf, perf events, tracing or reading other processes, userfaultfd, loading kernels or modules,
and the personality flags that weaken address-space randomisation. clone3 passes its flags in memory, where a
filter cannot look: it answers ENOSYS, and glibc then falls back to clone, whose flags are checked. Calls of another
architecture (32-bit calls on x86-64) kill the process: nothing legitimate in the sandbox makes them.

Built with libseccomp (through `pyseccomp`) in the app, outside the sandbox; see `filter_bpf`.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

# Namespace flags of clone and unshare (linux/sched.h).
_NAMESPACE_FLAGS = {
    "CLONE_NEWTIME": 0x00000080, "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWNET": 0x40000000,
}
# personality() flags that turn off randomisation or make data executable (linux/personality.h).
_PERSONALITY_FLAGS = (0x0040000, 0x0100000, 0x0200000, 0x0400000)
DENIED = (
    "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
    "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "bpf", "perf_event_open", "ptrace", "process_vm_readv", "process_vm_writev",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "acct", "swapon", "swapoff", "syslog",
)


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python binding) is missing: the sandbox cannot be made as safe as it should be."""


@functools.cache
def filter_bpf() -> bytes:
    """The filter as the BPF program bubblewrap reads from its --seccomp descriptor, for this machine's arch."""
    try:
        import pyseccomp as seccomp
    except (ImportError, RuntimeError, OSError) as exc:  # pyseccomp raises RuntimeError without libseccomp.so
        raise SeccompUnavailable(f"libseccomp is needed for the sandbox's system-call filter ({exc}): install it "
                                 "(Debian/Ubuntu: `sudo apt-get install libseccomp2`)") from exc
    deny = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    arch = seccomp.system_arch()

    def add(action: int, name: str, *args: object) -> None:
        try:
            seccomp.resolve_syscall(arch, name)
        except Exception:  # a call this architecture does not have
            return
        rules.add_rule(action, name, *args)

    for name in DENIED:
        add(deny, name)
    add(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in _NAMESPACE_FLAGS.values():
        add(deny, "unshare", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        add(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))  # flags are clone's first argument
    for flag in _PERSONALITY_FLAGS:
        add(deny, "personality", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    with tempfile.TemporaryFile() as file:
        rules.export_bpf(file)
        file.seek(0)
        return file.read()


def write_filter(path: os.PathLike[str] | str) -> None:
    """Write the filter where the sandbox's launcher opens it for bubblewrap (a folder only the app can read)."""
    with open(path, "wb") as file:
        file.write(filter_bpf())
