"""The tools that belong to one browser session: its Python kernel and folder, its web sources, image API.

Nothing here is shared between sessions; `close()` (also run when the object is garbage-collected, i.e. when
Streamlit drops the session) shuts the kernel down and deletes the folder.
"""

from __future__ import annotations

import os
import re
import shutil
import unicodedata
import uuid
import weakref
from pathlib import Path

from app.config import SandboxLimits, sessions_dir
from app.tools.browser import WebBrowser
from app.tools.documents import DocumentError
from app.tools.images import ImageAPI
from app.tools.python import PythonTool
from app.tools.sandbox import isolation
from app.tools.sandbox.kernel import KernelSession
from app.tools.tool_registry import ToolHints, ToolRegistry

_MAX_NAME_CHARS = 100
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^\w .()+,=@-]")


def _cleanup(kernel: KernelSession, folder: Path) -> None:
    kernel.shutdown()
    shutil.rmtree(folder, ignore_errors=True)


def safe_upload_name(name: str) -> str:
    """A plain file name for an uploaded file: no folders, no leading dots, no control or odd characters, at most
    100 characters with the extension kept; "upload" when nothing usable is left."""
    name = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE_NAME_CHARACTERS.sub("_", name).strip(" .")
    if not name.strip("_"):
        return "upload"
    stem, dot, suffix = name.rpartition(".")
    if not stem or len(suffix) > 10:
        stem, dot, suffix = name, "", ""
    room = _MAX_NAME_CHARS - len(dot + suffix)
    return stem[:room].rstrip(" .") + dot + suffix


class SessionTools:
    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.folder = sessions_dir() / uuid.uuid4().hex
        self.kernel = KernelSession(self.folder, limits)
        self.kernel.layout.create()
        self.browser = WebBrowser()
        self.image_api = ImageAPI.from_env()
        self._finalizer = weakref.finalize(self, _cleanup, self.kernel, self.folder)

    @property
    def python_unavailable(self) -> str:
        """Why the Python tool is not offered ('' when it is): the configured isolation cannot be had here."""
        try:
            isolation.check_available(self.kernel.limits)
        except isolation.SandboxUnavailable as exc:
            return str(exc)
        return ""

    def registry(self) -> ToolRegistry:
        tools = ToolRegistry()
        if not self.python_unavailable:
            python = PythonTool(self.kernel)
            # The registry's limit is the backstop; the kernel interrupts a cell at its own, shorter limit.
            tools.register(python.python, timeout_s=self.kernel.limits.cell_timeout_s + 20,
                           on_cancel=self.kernel.interrupt, hints=python.hints)
        # The browser only reads (pages, search results), from the open web.
        tools.register(self.browser.web_search, timeout_s=30, hints=ToolHints.reader("Web search", open_world=True))
        tools.register(self.browser.open_url, timeout_s=30,
                       hints=ToolHints.reader("Open a web page", open_world=True))
        tools.register(self.browser.mclick, timeout_s=90,
                       hints=ToolHints.reader("Open search results", open_world=True))
        if self.image_api is not None:
            tools.register(self.image_api.generate_image, timeout_s=150, hints=ImageAPI.HINTS)
        return tools

    def save_upload(self, name: str, data: bytes) -> Path:
        """Put an uploaded file in the session's uploads folder, which the kernel sees read-only (and as links in
        its working folder). The name is made safe, an existing different file is never overwritten, and nothing
        already in the folder (a link, say) is followed. DocumentError when the uploads would outgrow the
        kernel's disk limit."""
        uploads = self.kernel.layout.uploads
        uploads.mkdir(parents=True, exist_ok=True)
        used = sum(entry.stat(follow_symlinks=False).st_size for entry in os.scandir(uploads))
        limit = self.kernel.limits.disk_mb * 1024 * 1024
        if used + len(data) > limit:
            raise DocumentError(f"the uploads of this session would exceed {self.kernel.limits.disk_mb} MB "
                                "(DEMO_KERNEL_DISK_MB): start a new session or raise the limit")
        target = uploads / safe_upload_name(name)
        stem, suffix, n = target.stem, target.suffix, 1
        while True:
            try:
                descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                break
            except FileExistsError:
                if _same_file_content(target, data):
                    return target
                n += 1
                target = uploads / f"{stem} ({n}){suffix}"
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        return target

    def close(self) -> None:
        self._finalizer()


def _same_file_content(path: Path, data: bytes) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # a link or something else that is not our file
        return False
    with os.fdopen(descriptor, "rb") as file:
        return os.fstat(file.fileno()).st_size == len(data) and file.read() == data
