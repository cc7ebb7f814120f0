"""The tools that belong to one browser session: its Python kernel and folder, its web sources, image API.

Nothing here is shared between sessions; `close()` (also run when the object is garbage-collected, i.e. when
Streamlit drops the session) shuts the kernel down and deletes the folder.
"""

from __future__ import annotations

import shutil
import uuid
import weakref
from pathlib import Path

from app.config import SandboxLimits, sessions_dir
from app.tools.browser import WebBrowser
from app.tools.images import ImageAPI
from app.tools.kernel import KernelSession
from app.tools.python import PythonTool
from app.tools.registry import ToolRegistry


def _cleanup(kernel: KernelSession, folder: Path) -> None:
    kernel.shutdown()
    shutil.rmtree(folder, ignore_errors=True)


class SessionTools:
    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.folder = sessions_dir() / uuid.uuid4().hex
        self.folder.mkdir(parents=True, exist_ok=True)
        self.kernel = KernelSession(self.folder, limits)
        self.browser = WebBrowser()
        self.image_api = ImageAPI.from_env()
        self._finalizer = weakref.finalize(self, _cleanup, self.kernel, self.folder)

    def registry(self) -> ToolRegistry:
        tools = ToolRegistry()
        python = PythonTool(self.kernel)
        # The registry's limit is the backstop; the kernel interrupts a cell at its own, shorter limit.
        tools.register(python.python, timeout_s=self.kernel.limits.cell_timeout_s + 20, on_cancel=self.kernel.interrupt)
        tools.register(self.browser.web_search, timeout_s=30)
        tools.register(self.browser.open_url, timeout_s=30)
        tools.register(self.browser.mclick, timeout_s=90)
        if self.image_api is not None:
            tools.register(self.image_api.generate_image, timeout_s=150)
        return tools

    def save_upload(self, name: str, data: bytes) -> Path:
        """Put an uploaded file in the kernel's folder so the model can open it from Python."""
        target = self.folder / Path(name).name
        stem, suffix, n = target.stem, target.suffix, 1
        while target.exists() and target.read_bytes() != data:
            n += 1
            target = self.folder / f"{stem} ({n}){suffix}"
        target.write_bytes(data)
        return target

    def close(self) -> None:
        self._finalizer()
