"""Messages to and from their stored form with every field kept (`Message == decode_message(encode_message(m))`,
attachments' bytes as base64; the shape is documented in app/storage/schema.py), the text that search looks at,
and a readable Markdown export."""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from app.domain.conversation import Message
from app.domain.media import ImageError, sniff_mime
from app.storage.schema import MessageRecord

TITLE_FROM_MESSAGE_CHARS = 80
MAX_TITLE_CHARS = 200


def encode_message(message: Message) -> dict[str, Any]:
    """A JSON-able dict of every field of the message; fields at their default are left out."""
    return MessageRecord.of(message).model_dump(mode="json", exclude_defaults=True)


def decode_message(data: dict[str, Any]) -> Message:
    """The message of an `encode_message` dict; raises pydantic.ValidationError (a ValueError) on a wrong shape."""
    return MessageRecord.model_validate(data).to_message()


def encode_message_json(message: Message) -> str:
    """`encode_message` as JSON text, written in one step (what the messages table stores)."""
    return MessageRecord.of(message).model_dump_json(exclude_defaults=True)


def decode_message_json(text: str | bytes) -> Message:
    return MessageRecord.model_validate_json(text).to_message()


def search_text(message: Message) -> str:
    """What search matches against: the content and a tool's full output, lower-cased here (Unicode-aware on every
    backend), NUL removed (PostgreSQL text cannot hold it)."""
    parts = [message.content, message.display_text or ""]
    return "\n".join(part for part in parts if part).lower().replace("\x00", "")


def clean_title(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    """One line of at most `limit` characters: whitespace runs become one space, control characters go."""
    line = " ".join(text.split())
    return "".join(ch for ch in line if unicodedata.category(ch) != "Cc")[:limit].strip()


def title_from(message: Message) -> str:
    """A conversation title from its first user message: the first non-empty line, cut to 80 characters."""
    for line in message.content.splitlines():
        if line.strip():
            return clean_title(line, TITLE_FROM_MESSAGE_CHARS)
    return ""


# ----- Markdown export ------------------------------------------------------------------------------------------

_HEADINGS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool result"}


def conversation_to_markdown(title: str, messages: Iterable[Message]) -> str:
    """A readable export: a heading per message, tool calls as fenced JSON (with the model's own arguments where the
    user edited them), tool output fenced (a structured result too, as JSON), images inline as data URIs, documents'
    text fenced, a reasoning model's thought fenced above its answer, answer metrics (with the model that wrote it),
errors and the user's feedback under the answer."""
    blocks = [f"# {_escape_line(title) or 'Conversation'}"]
    for message in messages:
        blocks.extend(_message_blocks(message))
    return "\n\n".join(blocks) + "\n"


def _message_blocks(message: Message) -> list[str]:
    heading = _HEADINGS[message.role]
    if message.role == "tool":
        details = [part for part in (message.name, message.tool_status,
                                     f"{message.duration_s:.2f} s" if message.duration_s is not None else None) if part]
        heading += f" ({', '.join(_escape_line(part) for part in details)})" if details else ""
    blocks = [f"## {heading}"]
    if message.thinking:
        counted = message.metrics.thinking_tokens if message.metrics else 0
        tokens = f" ({counted} tokens)" if counted else ""
        blocks.append(f"**Thought**{tokens}\n\n" + _fenced(message.thinking, "text"))
    if message.role == "tool":
        output = message.display_text if message.display_text is not None else message.content
        if output:
            blocks.append(_fenced(output, "text"))
        if message.structured is not None:
            structured = json.dumps(message.structured, ensure_ascii=False, indent=2)
            blocks.append("**Structured result**\n\n" + _fenced(structured, "json"))
    elif message.content:
        blocks.append(message.content)
    for call in message.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False, indent=2)
        blocks.append(f"**Tool call** `{_escape_line(call.name)}` ({_escape_line(call.id)})\n\n"
                      + _fenced(arguments, "json"))
        if call.edited_from is not None:
            written = json.dumps(call.edited_from, ensure_ascii=False, indent=2)
            blocks.append("Edited by the user before it ran; the model wrote:\n\n" + _fenced(written, "json"))
    for attachment in message.attachments:
        name = _escape_line(attachment.name)
        note = f" ({_escape_line(attachment.note)})" if attachment.note else ""
        if attachment.kind == "image" and attachment.data:
            data = base64.b64encode(attachment.data).decode("ascii")
            blocks.append(f"![{name}](data:{_image_type(attachment.data)};base64,{data}){note}")
        elif attachment.kind == "passages":
            blocks.append(f"**Sources:** {name}{note}" + "".join(
                f"\n\n[{source.number}] {_escape_line(source.document)}, {_escape_line(source.location)}\n\n"
                + _fenced(source.text, "text") for source in attachment.sources))
        else:
            blocks.append(f"**Attachment:** {name}{note}" + ("\n\n" + _fenced(attachment.text, "text")
                                                               if attachment.text else ""))
    if message.error:
        blocks.append(f"> **Error:** {_escape_line(message.error)}")
    if message.metrics is not None:
        model = f"{_escape_line(message.model)} · " if message.model else ""
        blocks.append(f"_{model}{message.metrics.summary()}_")
    if message.feedback is not None:
        thumb = "👍 Good answer" if message.feedback.rating == "up" else "👎 Bad answer"
        comment = f": {_escape_line(message.feedback.comment)}" if message.feedback.comment else ""
        blocks.append(f"**Feedback:** {thumb}{comment}")
    return blocks


def _fenced(text: str, language: str) -> str:
    """A code fence longer than any backtick run in the text, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _escape_line(text: str) -> str:
    return clean_title(text, 10_000)


def _image_type(data: bytes) -> str:
    try:
        return sniff_mime(data)
    except ImageError:  # bytes of an older or imported record that are no picture we know
        return "application/octet-stream"
