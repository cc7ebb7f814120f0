"""Export and import of one conversation as a JSON file, and the strict check of an imported one.

The file (format version 1):

    {"format": "composite-demo-conversation", "version": 1,
     "title": str, "page": str, "settings": {...},
     "created_at": ISO 8601 with time zone, "updated_at": the same (informative; an import is updated now),
     "messages": [OpenAI chat messages, Message.to_openai(): what any OpenAI-compatible tool can replay],
     "metadata": [one record per message, app/storage/schema.py: everything else (metrics, tool status,
                  attachments with base64 data, display text, ...)]}

`metadata` is optional: without it the messages are read as plain OpenAI messages. With it, it is what the import
restores, and it must match `messages` in length and roles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from app.conversation import Message
from app.storage.codec import MAX_TITLE_CHARS, encode_message
from app.storage.errors import ImportRejected
from app.storage.schema import MessageRecord

if TYPE_CHECKING:
    from app.storage.repository import StoredConversation

FORMAT = "composite-demo-conversation"
FORMAT_VERSION = 1
MAX_IMPORT_BYTES = 50 * 1024 * 1024
MAX_MESSAGES = 10_000
_ERRORS_SHOWN = 3


def export_document(stored: StoredConversation) -> dict[str, Any]:
    """The conversation as a JSON-able dict in the format above."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "title": stored.title,
        "page": stored.page,
        "settings": stored.settings,
        "created_at": stored.created_at.isoformat(),
        "updated_at": stored.updated_at.isoformat(),
        "messages": [message.to_openai() for message in stored.messages],
        "metadata": [encode_message(message) for message in stored.messages],
    }


@dataclass(frozen=True)
class ImportedConversation:
    title: str
    page: str
    settings: dict[str, Any]
    created_at: datetime | None
    messages: list[Message]


def parse_import(raw: bytes) -> ImportedConversation:
    """The conversation in an exported file; ImportRejected says what is wrong and where."""
    if len(raw) > MAX_IMPORT_BYTES:
        raise ImportRejected(f"the file is {len(raw):,} bytes; at most {MAX_IMPORT_BYTES // 2**20} MB "
                             f"({MAX_IMPORT_BYTES:,} bytes) can be imported")
    try:
        document = ExportFile.model_validate_json(raw)
    except ValidationError as exc:
        raise ImportRejected(_describe(exc)) from None
    try:
        json.dumps(document.settings, allow_nan=False)
    except ValueError as exc:
        raise ImportRejected(f"settings: {exc}") from None
    return ImportedConversation(document.title, document.page, document.settings, document.created_at,
                                _messages(document))


# ----- the file's shape -------------------------------------------------------------------------------------------

class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["text"]
    text: str


class OpenAIMessage(BaseModel):
    """An OpenAI chat message as the export writes it. Fields OpenAI has and this app does not keep (e.g.
    reasoning_content) are ignored; tool calls are checked by Message.from_openai."""

    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ExportFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    format: Literal["composite-demo-conversation"]
    version: Literal[1]
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    page: str = Field(min_length=1, max_length=64)
    settings: dict[str, Any] = {}
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None
    messages: list[OpenAIMessage] = Field(max_length=MAX_MESSAGES)
    metadata: list[MessageRecord] | None = Field(default=None, max_length=MAX_MESSAGES)


def _messages(document: ExportFile) -> list[Message]:
    if document.metadata is None:
        messages = []
        for index, item in enumerate(document.messages):
            try:
                messages.append(Message.from_openai(item.model_dump(exclude_none=True)))
            except ValueError as exc:
                raise ImportRejected(f"messages[{index}]: {exc}") from None
        return messages
    if len(document.metadata) != len(document.messages):
        raise ImportRejected(f"metadata: {len(document.metadata)} entries for {len(document.messages)} messages; "
                             "there must be one per message")
    for index, (item, record) in enumerate(zip(document.messages, document.metadata, strict=True)):
        if item.role != record.role:
            raise ImportRejected(f"metadata[{index}].role: {record.role!r} does not match messages[{index}].role "
                                 f"{item.role!r}")
    return [record.to_message() for record in document.metadata]


def _describe(error: ValidationError) -> str:
    """pydantic's errors as `where: what`, e.g. `metadata[3].attachments[0].data: not valid base64`."""
    lines = []
    for item in error.errors(include_url=False)[:_ERRORS_SHOWN]:
        where = ""
        for part in item["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        # A validator's own ValueError: its message alone, without pydantic's "Value error, " before it.
        what = str(item["ctx"]["error"]) if item["type"] == "value_error" else item["msg"]
        lines.append(f"{where or 'the file'}: {what}")
    more = error.error_count() - _ERRORS_SHOWN
    return "; ".join(lines) + (f" (and {more} more problems)" if more > 0 else "")
