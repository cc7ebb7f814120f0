"""What a cell shows, collected from the kernel's iopub messages under the cell's budgets.

Code in the cell can send any message a kernel may send (it can reach the kernel's own sockets), so the caps are
enforced here, as each message arrives, for every kind: one budget of characters shared by prints, results,
errors and every text MIME type, and a count and a byte budget for pictures, which must really be PNG or JPEG.
Nothing is kept past a budget: further output of that kind is dropped with one note. Everything received counts
toward `flooding`, which tells the kernel to stop a cell that keeps sending output nobody will see.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from app.config import SandboxLimits

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PARTIAL_ANSI = re.compile(r"\x1b(\[[0-9;?]*)?$")
# Text kinds shown when a display has no text/plain, in this order; anything else (widgets, JavaScript...) is skipped.
_TEXT_MIMES = ("text/markdown", "text/latex", "application/json", "text/html")
_IMAGE_MIMES = ("image/png", "image/jpeg")
_IMAGE_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG"}
_MAX_PIXELS = 16_000_000  # a plot is a few megapixels; more is a decompression bomb, not a figure
# A cell that keeps sending after its budgets are spent is stopped once it has sent this many times its budgets,
# or this many messages that were dropped.
_FLOOD_FACTOR = 20
_FLOOD_MESSAGES = 20_000


@dataclass
class CellOutput:
    kind: str  # "text", "image" or "error"
    text: str = ""
    image: bytes = b""  # PNG or JPEG, checked


@dataclass
class CellResult:
    outputs: list[CellOutput] = field(default_factory=list)
    timed_out: bool = False
    died: bool = False  # the kernel stopped while running the cell
    stopped: bool = False  # Stop came before the cell ran (while the kernel was starting): it never ran
    notes: list[str] = field(default_factory=list)  # what happened to the kernel itself (restarted, died...)

    @property
    def ok(self) -> bool:
        failed = self.timed_out or self.died or self.stopped
        return not failed and not any(o.kind == "error" for o in self.outputs)

    @property
    def images(self) -> list[bytes]:
        return [o.image for o in self.outputs if o.kind == "image"]

    def text(self) -> str:
        parts: list[str] = []
        figure = 0
        for output in self.outputs:
            if output.kind == "image":
                figure += 1
                parts.append(f"[Figure {figure} was displayed to the user.]\n")
            else:
                parts.append(output.text)
        body = "".join(parts).strip()
        notes = "\n".join(self.notes)
        return "\n".join(p for p in (body or ("" if notes else "(no output)"), notes) if p)


class OutputCollector:
    """Adds one cell's iopub messages to `result`, within the cell's budgets (see the module's docstring)."""

    def __init__(self, result: CellResult, limits: SandboxLimits, text_room: int = 1000) -> None:
        self.result = result
        # The kernel cuts its prints at output_chars with its own note; the room lets that note through.
        self.max_chars = limits.output_chars + text_room
        self.max_images = limits.max_images
        self.max_image_bytes = int(limits.image_mb * 1024 * 1024)
        self._chars = self._images = self._image_bytes = 0  # kept now (clear_output frees them)
        # Everything sent, kept or not, whatever clear_output did: the flood measure, text and pictures apart.
        self._received = self._received_image_bytes = self._dropped_messages = 0
        self._decoded_image_bytes = 0  # pictures checked with Pillow in this cell, shown or cleared since
        self._noted: set[str] = set()

    @property
    def flooding(self) -> bool:
        """The cell has sent far more than its budgets could ever show: it should be stopped."""
        return (self._received > _FLOOD_FACTOR * self.max_chars
                or self._received_image_bytes > _FLOOD_FACTOR * self.max_image_bytes
                or self._dropped_messages > _FLOOD_MESSAGES)

    def skip(self) -> None:
        """A message of no concern to this cell (tagged for another request): dropped, but it counts as sent."""
        self._dropped_messages += 1

    def add(self, message: dict[str, Any]) -> bool:
        """Add one message of this cell; True once the cell is finished."""
        kind, content = message.get("msg_type"), message.get("content") or {}
        if kind == "status":
            return content.get("execution_state") == "idle"
        if kind == "stream":
            text = str(content.get("text", ""))
            self._received += len(text)
            self._add_text(text)
        elif kind in ("execute_result", "display_data", "update_display_data"):
            data = content.get("data")
            if isinstance(data, dict):
                self._add_display(data)
        elif kind == "error":
            self._add_error(content)
        elif kind == "clear_output":
            self.result.outputs.clear()
            self._chars = self._images = self._image_bytes = 0
        return False

    # ----- kinds -------------------------------------------------------------------------------------------------

    def _add_display(self, data: dict[str, Any]) -> None:
        for mime in _IMAGE_MIMES:
            if isinstance(data.get(mime), str):
                self._add_image(mime, data[mime])
                return
        self._received += sum(len(v) for v in data.values() if isinstance(v, str))
        for mime in ("text/plain", *_TEXT_MIMES):
            if mime in data:
                self._add_text(_as_text(data[mime], self.max_chars - self._chars + 1) + "\n", new_output=True)
                return

    def _add_error(self, content: dict[str, Any]) -> None:
        room = self.max_chars - self._chars + 1
        lines = content.get("traceback")
        text = ""
        if isinstance(lines, list):  # join only what can be kept: a flood of huge tracebacks costs nothing here
            kept: list[str] = []
            size = 0
            for line in map(str, lines):
                self._received += len(line)
                if size < room:  # colours removed before the cut, which could split one
                    clean = _ANSI.sub("", line[: 2 * (room - size) + 64])
                    kept.append(_PARTIAL_ANSI.sub("", clean[: room - size]))
                    size += len(kept[-1]) + 1
            text = "\n".join(kept)
        if not text:
            text = f"{str(content.get('ename', 'Error'))[:200]}: {str(content.get('evalue', ''))[:room]}"
            self._received += len(text)
        self._add_text(text + "\n", kind="error")

    def _add_text(self, text: str, new_output: bool = False, kind: str = "text") -> None:
        room = self.max_chars - self._chars
        if room <= 0:
            self._dropped_messages += 1
            return
        if len(text) > room:
            text = text[:room]
            self._chars = self.max_chars
            if self._first("text"):
                text += (f"\n[Output cut: the cell's output passed {self.max_chars:,} characters; the rest was "
                         "dropped.]\n")
        else:
            self._chars += len(text)
        outputs = self.result.outputs
        if kind == "text" and not new_output and outputs and outputs[-1].kind == "text":
            outputs[-1].text += text
        else:
            outputs.append(CellOutput(kind, text))

    def _add_image(self, mime: str, encoded: str) -> None:
        self._received_image_bytes += len(encoded)
        size = len(encoded) * 3 // 4  # checked before decoding: nothing past the budget is ever decoded
        # clear_output frees the shown budget, not the work: at most twice the budget is ever decoded per cell.
        if (self._images >= self.max_images or self._image_bytes + size > self.max_image_bytes + 3
                or self._decoded_image_bytes + size > 2 * self.max_image_bytes + 3):
            self._dropped_messages += 1
            if self._first("images"):
                self.result.notes.append(f"[More pictures were not shown: a cell may show {self.max_images} "
                                         f"pictures, {self.max_image_bytes / 2**20:g} MB in all.]")
            return
        self._decoded_image_bytes += size
        data = _checked_image(encoded, _IMAGE_FORMATS[mime])
        if data is None:
            self._dropped_messages += 1
            if self._first("invalid"):
                self.result.notes.append(f"[A picture was not shown: its data is not a valid {mime} image.]")
            return
        self._images += 1
        self._image_bytes += len(data)
        self.result.outputs.append(CellOutput("image", image=data))

    def _first(self, note: str) -> bool:
        """True the first time a note is due: each is given once per cell."""
        first = note not in self._noted
        self._noted.add(note)
        return first


def _as_text(value: Any, limit: int) -> str:
    """A display's value as text, at most about `limit` characters (JSON is serialised, then cut)."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):  # nbformat's multi-line strings
        return "".join(value)[:limit]
    try:
        return json.dumps(value)[:limit]
    except (TypeError, ValueError):
        return ""


def _checked_image(encoded: str, pillow_format: str) -> bytes | None:
    """The decoded picture when it really is one of `pillow_format` of a sane size, else None."""
    try:
        data = base64.b64decode(encoded, validate=False)
    except (binascii.Error, ValueError):
        return None
    try:
        with Image.open(io.BytesIO(data), formats=[pillow_format]) as image:
            if image.width * image.height > _MAX_PIXELS:
                return None
            image.verify()  # structure and checksums, without decoding the pixels
    except Exception:  # Pillow raises many kinds for bad data; any of them means "not a picture"
        return None
    return data
