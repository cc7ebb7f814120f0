"""Runs inside each sandboxed kernel before the first cell (IPKernelApp.exec_files; never imported by the app).

- Output of one cell is capped at DEMO_SANDBOX_OUTPUT_CHARS characters, so a runaway print does not ship
  hundreds of megabytes to the app; the app caps again on its side, because code can undo anything done here.
- Uploaded files (in the read-only folder DEMO_SANDBOX_UPLOADS) appear in the working folder as links before each
  cell, so `open("data.csv")` finds a file the user attached after the kernel started.
Everything it defines is deleted from the user's namespace at the end.
"""


def _install_output_cap(shell, limit: int) -> None:
    import sys

    written = {"chars": 0, "noted": False}

    def capped(write):
        def write_capped(text):
            room = limit - written["chars"]
            if room <= 0:
                if not written["noted"]:
                    written["noted"] = True
                    write(f"\n[Output cut: this cell printed more than {limit:,} characters.]\n")
                return len(text)
            written["chars"] += min(len(text), room)
            return write(text[:room]) if len(text) > room else write(text)

        return write_capped

    for stream in (sys.stdout, sys.stderr):
        stream.write = capped(stream.write)  # type: ignore[method-assign]  # this process's own streams

    plain = shell.display_formatter.formatters["text/plain"]
    original = type(plain).__call__

    def format_capped(self, obj):
        text = original(self, obj)
        if isinstance(text, str) and len(text) > limit:
            return text[:limit] + f"\n[Result cut: its text has more than {limit:,} characters.]"
        return text

    type(plain).__call__ = format_capped

    def reset(*_args):
        written["chars"], written["noted"] = 0, False

    shell.events.register("pre_run_cell", reset)


def _install_upload_links(shell, uploads: str) -> None:
    import os

    def link(*_args):
        try:
            names = os.listdir(uploads)
        except OSError:
            return
        for name in names:
            if not os.path.lexists(name):
                try:
                    os.symlink(os.path.join(uploads, name), name)
                except OSError:
                    pass  # a full or read-only folder: the file is still in uploads/

    shell.events.register("pre_run_cell", link)
    link()


# Functions only reach the modules they import themselves: the names defined here are deleted below.
_shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821 (IPython runs this file in the kernel's namespace)
_install_output_cap(_shell, int(__import__("os").environ.pop("DEMO_SANDBOX_OUTPUT_CHARS", "0") or 0) or 50_000)
_install_upload_links(_shell, __import__("os").environ.pop("DEMO_SANDBOX_UPLOADS", ""))
del _shell, _install_output_cap, _install_upload_links
