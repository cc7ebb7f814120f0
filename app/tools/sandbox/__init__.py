"""The Python tool's sandbox: one Jupyter kernel per session (`kernel`), its output collected within budgets
(`output`), isolated by bubblewrap with a seccomp filter and a cgroup (`isolation`, `seccomp`, `cgroup`), the
processes a cell leaves behind ended (`processes`).

The isolation boundary is in the tree: `inside/` holds the code that runs in the sandbox, `launchers/` the scripts
that start it on the host. The app never imports either; the kernel spec runs them as scripts."""
