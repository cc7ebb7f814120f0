"""An MCP tool result as the app's ToolOutput: text for the model, images for the chat, isError as a failed call.

Images come from another program, so they go through app/domain/media.py (decoded, limited, re-encoded) like any
picture a user attaches; one that cannot be used becomes a line of text saying why. A structured result
(structuredContent) is kept as data for the page and storage, and its JSON is part of the text the model reads
unless a text block already carries it. (The app's own tools write their text for the model and keep their
structured results out of it: the same values twice would only cost tokens.)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import SchemaError
from mcp import types

from app.config import McpSettings
from app.domain.conversation import Attachment
from app.domain.media import ImageError, prepare_image
from app.tools.tool_registry import ToolOutput, output_validator

_MAX_COMPARED_CHARS = 1_000_000  # a longer text is not parsed to compare: its JSON is sent again, at worst


def to_output(result: types.CallToolResult, tool: str, output_schema: Mapping[str, Any] | None = None,
              max_images: int = McpSettings.max_images) -> ToolOutput:
    """`output_schema`: the tool's declared one. A structured result that breaks it is not read to the model (the
    registry then leaves it out and says so, app/tools/tool_registry.py). Images past `max_images` are named, not
    decoded (a server once sent 400 in one result, and every one was kept)."""
    lines: list[str] = []
    images = _Images(tool, max_images)
    for block in result.content:
        if isinstance(block, types.TextContent):
            lines.append(block.text)
        elif isinstance(block, types.ImageContent):
            lines.append(images.add(block.data, block.mime_type))
        elif isinstance(block, types.AudioContent):
            lines.append(f"[audio ({block.mime_type}): not shown]")
        elif isinstance(block, types.ResourceLink):
            lines.append(_link(block))
        elif isinstance(block, types.EmbeddedResource):
            lines.append(_embedded(block.resource, images))
    structured = result.structured_content
    fits = output_schema is None or _fits(output_schema, structured)
    if structured is not None and fits and not _already_in(result.content, structured):
        lines.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(line for line in lines if line)
    # Only an object is kept as the structured result (what ToolResult.structured holds, and all MCP allowed before
    # 2026-07-28); the model reads any structured value through the text above.
    kept = structured if isinstance(structured, dict) else None
    if images.left_out:
        text += f"\n[{images.left_out} more image(s) not shown: a tool result shows at most {max_images}]"
    if result.is_error:
        return ToolOutput(text or f"{tool} failed; the server gave no reason.", images.kept, ok=False,
                          structured=kept)
    return ToolOutput(text or "(the tool returned nothing)", images.kept, structured=kept)


def _fits(schema: Mapping[str, Any], structured: Any) -> bool:
    try:
        return output_validator(schema).is_valid(structured)
    except SchemaError:  # a $ref to outside the schema: the registry says why (app/tools/tool_registry.py)
        return False


def _already_in(content: list[types.ContentBlock], structured: object) -> bool:
    """Whether a text block already says what the structured result holds, so the model does not read it twice: MCP
    asks servers to send the structured result's JSON as text too, and the SDKs' servers do (a function's plain
    return value is structured as {"result": value} and its text is the value alone)."""
    for block in content:
        if not isinstance(block, types.TextContent) or len(block.text) > _MAX_COMPARED_CHARS:
            continue
        try:
            said = json.loads(block.text)
        except ValueError:
            said = block.text  # a plain string value is sent as its text, unquoted
        if said == structured or structured == {"result": said}:
            return True
    return False


class _Images:
    """A result's images, decoded and limited (app/domain/media.py), at most `most` of them."""

    def __init__(self, tool: str, most: int) -> None:
        self.tool, self.most = tool, most
        self.kept: list[Attachment] = []
        self.left_out = 0

    def add(self, data: str, mime: str) -> str:
        """The line that stands for the image in the text."""
        if len(self.kept) >= self.most:
            self.left_out += 1
            return ""
        number = len(self.kept) + 1
        name = f"{self.tool} image {number}"
        try:
            prepared = prepare_image(base64.b64decode(data, validate=True), name)
        except (binascii.Error, ValueError) as exc:  # ImageError is a ValueError
            reason = str(exc) if isinstance(exc, ImageError) else "its data is not valid base64"
            return f"[an image ({mime}) that could not be shown: {reason}]"
        self.kept.append(Attachment(kind="image", name=name, data=prepared.data))
        return f"[image {number} ({prepared.width}x{prepared.height}): shown to the user]"


def _link(link: types.ResourceLink) -> str:
    about = f": {link.description}" if link.description else ""
    return f"[resource {link.title or link.name} <{link.uri}>{about}]"


def _embedded(resource: types.TextResourceContents | types.BlobResourceContents, images: _Images) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    if mime.startswith("image/"):
        return images.add(resource.blob, mime)
    return f"[resource <{resource.uri}> ({mime}, binary): not shown]"
