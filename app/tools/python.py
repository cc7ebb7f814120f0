"""The `python` tool: code runs in the browser session's own sandboxed Jupyter kernel (app/tools/sandbox/kernel.py)."""

from __future__ import annotations

from app.code_blocks import strip_code_fence
from app.conversation import Attachment
from app.tools.registry import ToolError, ToolOutput
from app.tools.sandbox.kernel import KernelSession, SandboxBusy


class PythonTool:
    def __init__(self, kernel: KernelSession) -> None:
        self.kernel = kernel

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
