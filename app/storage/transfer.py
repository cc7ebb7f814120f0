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

Everything is checked before anything is saved, so that what is imported is something the pages can show: each
field's type (no "1" for 1, no list for a string, no unknown key; `settings` as in app/storage/schema.py), images
that are pictures, and tool calls that hang together: only assistant messages make calls, each with an id no other
call of the conversation has, and each tool message answers a call made before it, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from app.conversation import Message
from app.media import ImageError, sniff_mime
from app.storage.codec import MAX_TITLE_CHARS, encode_message
from app.storage.errors import ImportRejected
from app.storage.records import StoredConversation
from app.storage.schema import MessageRecord, SettingsRecord, describe

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
        raise ImportRejected(describe(exc, shown=_ERRORS_SHOWN)) from None
    messages = _messages(document)
    source = "messages" if document.metadata is None else "metadata"  # what the import restored them from
    _check_images(messages, source)
    _check_tool_calls(messages, source)
    return ImportedConversation(document.title, document.page, document.settings.model_dump(exclude_unset=True),
                                document.created_at, messages)


# ----- the file's shape -------------------------------------------------------------------------------------------

class ImageURL(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ContentPart(BaseModel):
    """A text part, or a user's picture as Message.to_openai writes it (a data: URL, which Message.from_openai
    decodes and checks). One model rather than a union of two: its errors name the field, not a union member."""

    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | None = None

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> ContentPart:
        if (self.text is None) == (self.type == "text") or (self.image_url is None) == (self.type == "image_url"):
            raise ValueError('a part is {"type": "text", "text": ...} or {"type": "image_url", "image_url": '
                             '{"url": ...}}')
        return self


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any] = "{}"  # JSON text as OpenAI writes it; decoded by ToolCall.from_openai


class OpenAIToolCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class OpenAIMessage(BaseModel):
    """An OpenAI chat message as the export writes it. Fields OpenAI has and this app does not keep (e.g.
    reasoning_content) are ignored; those it keeps are typed strictly."""

    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class ExportFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    format: Literal["composite-demo-conversation"]
    version: Literal[1]
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    page: str = Field(min_length=1, max_length=64)
    settings: SettingsRecord = Field(default_factory=SettingsRecord)
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


def _check_images(messages: list[Message], source: str) -> None:
    """A picture is a PNG, JPEG, WebP or GIF (by its first bytes, as the pages test what they show)."""
    for index, message in enumerate(messages):
        for number, attachment in enumerate(message.attachments):
            if attachment.kind == "image" and attachment.data:
                try:
                    sniff_mime(attachment.data)
                except ImageError as exc:
                    raise ImportRejected(f"{source}[{index}].attachments[{number}].data: {exc}") from None


def _check_tool_calls(messages: list[Message], source: str) -> None:
    """Ids unique and consistent: a tool message answering no call, or a call answered twice, would show a result
    under the wrong call (or none) and send the model a conversation no backend accepts."""
    made: dict[str, int] = {}  # call id -> the message that made it
    answered: dict[str, int] = {}  # call id -> the tool message that answered it
    for index, message in enumerate(messages):
        where = f"{source}[{index}]"
        if message.tool_calls and message.role != "assistant":
            raise ImportRejected(f"{where}.tool_calls: only assistant messages make tool calls")
        if message.tool_call_id is not None and message.role != "tool":
            raise ImportRejected(f"{where}.tool_call_id: only tool messages answer a tool call")
        for number, call in enumerate(message.tool_calls):
            if not call.id:
                raise ImportRejected(f"{where}.tool_calls[{number}].id: a tool call needs an id")
            if call.id in made:
                raise ImportRejected(f"{where}.tool_calls[{number}].id: {_short(call.id)} is already the id of a call "
                                     f"in {source}[{made[call.id]}]; each call needs its own")
            made[call.id] = index
        if message.role == "tool":
            call_id = message.tool_call_id
            if not call_id:
                raise ImportRejected(f"{where}.tool_call_id: a tool message must name the call it answers")
            if call_id not in made:
                raise ImportRejected(f"{where}.tool_call_id: {_short(call_id)} answers no tool call made before it")
            if call_id in answered:
                raise ImportRejected(f"{where}.tool_call_id: call {_short(call_id)} was already answered in "
                                     f"{source}[{answered[call_id]}]")
            answered[call_id] = index


def _short(text: str, limit: int = 60) -> str:
    """A value from the file, quoted and cut: the message is for reading, however long an id the file holds."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
