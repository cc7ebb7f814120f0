"""An MCP tool result as the app's ToolOutput: text for the model, images for the chat, isError as a failed call.

Images come from another program, so they go through app/media.py (decoded, limited, re-encoded) like any
picture a user attaches; one that cannot be used becomes a line of text saying why.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp import types

from app.conversation import Attachment
from app.media import ImageError, prepare_image
from app.tools.registry import ToolOutput


def to_output(result: types.CallToolResult, tool: str) -> ToolOutput:
    lines: list[str] = []
    images: list[Attachment] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            lines.append(block.text)
        elif isinstance(block, types.ImageContent):
            lines.append(_image(block.data, block.mime_type, tool, images))
        elif isinstance(block, types.AudioContent):
            lines.append(f"[audio ({block.mime_type}): not shown]")
        elif isinstance(block, types.ResourceLink):
            lines.append(_link(block))
        elif isinstance(block, types.EmbeddedResource):
            lines.append(_embedded(block.resource, tool, images))
    if not lines and result.structured_content is not None:
        lines.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(line for line in lines if line)
    if result.is_error:
        return ToolOutput(text or f"{tool} failed; the server gave no reason.", images, ok=False)
    return ToolOutput(text or "(the tool returned nothing)", images)


def _image(data: str, mime: str, tool: str, images: list[Attachment]) -> str:
    number = len(images) + 1
    name = f"{tool} image {number}"
    try:
        prepared = prepare_image(base64.b64decode(data, validate=True), name)
    except (binascii.Error, ValueError) as exc:  # ImageError is a ValueError
        reason = str(exc) if isinstance(exc, ImageError) else "its data is not valid base64"
        return f"[an image ({mime}) that could not be shown: {reason}]"
    images.append(Attachment(kind="image", name=name, data=prepared.data))
    return f"[image {number} ({prepared.width}x{prepared.height}): shown to the user]"


def _link(link: types.ResourceLink) -> str:
    about = f": {link.description}" if link.description else ""
    return f"[resource {link.title or link.name} <{link.uri}>{about}]"


def _embedded(resource: types.TextResourceContents | types.BlobResourceContents, tool: str,
              images: list[Attachment]) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    if mime.startswith("image/"):
        return _image(resource.blob, mime, tool, images)
    return f"[resource <{resource.uri}> ({mime}, binary): not shown]"
