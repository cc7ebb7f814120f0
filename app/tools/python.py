"""The `python` tool: code runs in the browser session's own sandboxed Jupyter kernel (app/tools/sandbox/kernel.py)."""

from __future__ import annotations

from app.domain.conversation import Attachment
from app.prompting.code_blocks import strip_code_fence
from app.tools.sandbox.kernel import KernelSession, SandboxBusy
from app.tools.tool_registry import ToolError, ToolHints, ToolOutput


class PythonTool:
    def __init__(self, kernel: KernelSession) -> None:
        self.kernel = kernel

    @property
    def hints(self) -> ToolHints:
        """What running code does to the world, which depends on the kernel's isolation (app/tools/sandbox/
        isolation.py). Never read-only or idempotent: code changes the kernel's variables and files, and running
        it twice can change them again. In bubblewrap, what it can write is its own: a filesystem of its own (its
        folder and /tmp), the folder of its own sockets; uploads, the system and the Python installation are
        read-only, and the app's files and other sessions are not there, so it is not destructive. Its network
        namespace has only its own loopback, so its world is closed, unless DEMO_KERNEL_NETWORK gives it the
        internet: then the world is open and code may change or delete things out there. Without isolation
        (DEMO_KERNEL_ISOLATION=none), code can do whatever the app's user can, network included."""
        limits = self.kernel.limits
        sandboxed = limits.isolation != "none"
        reaches_out = limits.network or not sandboxed
        return ToolHints(read_only=False, destructive=reaches_out, idempotent=False, open_world=reaches_out,
                         title="Python (sandboxed)" if sandboxed else "Python (not sandboxed)")

    def python(self, code: str) -> ToolOutput:
        """Run Python code in a Jupyter kernel and return what it prints, its result and its plots. Variables stay defined between calls. Files the user uploaded are in the current folder. Show plots with matplotlib (plt.show()).

        Args:
            code: The Python code to run.
        """  # noqa: E501 (a tool's docstring is its description, as the model reads it: one line)
        try:
            result = self.kernel.execute(strip_code_fence(code))
        except SandboxBusy as exc:
            raise ToolError(str(exc)) from exc
        images = [Attachment(kind="image", name=f"Figure {i}", data=png) for i, png in enumerate(result.images, 1)]
        return ToolOutput(result.text(), images, ok=result.ok)
