"""The stored and exported shape of a message, as pydantic models: one definition validates what is read back
from the database and what an imported file holds, and reports where a value is wrong.

A message record is a JSON object; fields at their default are left out when written:

    {"role": "user" | "assistant" | "tool" | "system",
     "content": str,
     "tool_calls": [{"id": str, "name": str, "arguments": {...}}],
     "tool_call_id": str, "name": str,                     # tool results
     "metrics": {"prompt_tokens": int, "completion_tokens": int, "time_to_first_token_s": float | null,
                 "tokens_per_second": float | null, "total_time_s": float,
                 "finish_reason": "stop" | "length" | "cancelled" | "tool_calls" | "error" | null,
                 "dropped_messages": int, "thinking_tokens": int, "thinking_time_s": float | null,
                 "cached_tokens": int},
     "error": str, "tool_status": "ok" | "failed" | "stopped", "duration_s": float, "display_text": str,
     "attachments": [{"kind": "image" | "document", "name": str, "note": str, "text": str,
                      "data": standard base64 of the bytes}],
     "thinking": str}                                        # a reasoning model's thought

A conversation's settings (what app/ui/persistence.py restores into the page's widgets when it is opened):

    {"system_prompt": str, "tool_choice": str}               # each optional
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError

from app.conversation import AnswerMetrics, Attachment, Message, ToolCall


def _from_base64(value: Any) -> Any:
    if isinstance(value, bytes):  # read from a Message: already bytes
        return value
    if not isinstance(value, str):
        raise ValueError("must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)  # validate: stray characters are an error, not skipped
    except ValueError:  # binascii.Error is one
        raise ValueError("not valid base64") from None


Base64Bytes = Annotated[bytes, BeforeValidator(_from_base64),
                        PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), return_type=str)]


class Record(BaseModel):
    # strict: no "1" for 1 or 1.5 for an int; forbid: a misspelt key is an error, not silently dropped;
    # no NaN or infinity, which JSON does not have.
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, from_attributes=True)


class SettingsRecord(Record):
    """A conversation's settings. A key is left out when the page did not set it; none may be null (a widget
    cannot show None)."""

    system_prompt: str = Field(default="", max_length=100_000)
    tool_choice: str = Field(default="", max_length=200)  # "auto", "none", "required" or a tool's name

    @classmethod
    def usable(cls, settings: Any) -> tuple[dict[str, Any], list[str]]:
        """The settings that are valid one by one, and what is wrong with the others (`where: what`): a stored
        conversation opens with its valid settings, the page's defaults for the rest."""
        if not isinstance(settings, dict):
            return {}, [f"settings: must be an object, not {type(settings).__name__}"]
        usable: dict[str, Any] = {}
        problems: list[str] = []
        for name, value in settings.items():
            try:
                cls.model_validate({name: value})
            except ValidationError as exc:
                problems.append(describe(exc, "settings"))
            else:
                usable[name] = value
        return usable, problems


class ToolCallRecord(Record):
    id: str
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class MetricsRecord(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    time_to_first_token_s: float | None = None
    tokens_per_second: float | None = None
    total_time_s: float = 0.0
    finish_reason: Literal["stop", "length", "cancelled", "tool_calls", "error"] | None = None
    dropped_messages: int = 0
    thinking_tokens: int = 0
    thinking_time_s: float | None = None
    cached_tokens: int = 0


class AttachmentRecord(Record):
    kind: Literal["image", "document"]
    name: str
    note: str = ""
    text: str = ""
    data: Base64Bytes = b""


class MessageRecord(Record):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metrics: MetricsRecord | None = None
    error: str | None = None
    tool_status: Literal["ok", "failed", "stopped"] | None = None
    duration_s: float | None = None
    display_text: str | None = None
    attachments: list[AttachmentRecord] = Field(default_factory=list)
    thinking: str = ""

    @classmethod
    def of(cls, message: Message) -> MessageRecord:
        return cls.model_validate(message, from_attributes=True)

    def to_message(self) -> Message:
        # A model's __dict__ is its fields: every field passes on by name, and faster than dict(model) (a long
        # conversation is 1,000 of these).
        return Message(**{
            **self.__dict__,
            "tool_calls": [ToolCall(**call.__dict__) for call in self.tool_calls],
            "metrics": AnswerMetrics(**self.metrics.__dict__) if self.metrics else None,
            "attachments": [Attachment(**attachment.__dict__) for attachment in self.attachments],
        })


_UNION_MEMBERS = {"str", "int", "float", "bool", "bytes"}


def describe(error: ValidationError, prefix: str = "", shown: int = 3) -> str:
    """pydantic's errors as `where: what`, e.g. `metadata[3].attachments[0].data: not valid base64`."""
    lines = []
    for item in error.errors(include_url=False)[:shown]:
        where = prefix
        for part in item["loc"]:
            if isinstance(part, str) and ("[" in part or part in _UNION_MEMBERS):
                continue  # which member of a union (`str`, `list[ContentPart]`) was tried: no place in the file
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        # A validator's own ValueError: its message alone, without pydantic's "Value error, " before it.
        what = str(item["ctx"]["error"]) if item["type"] == "value_error" else item["msg"]
        lines.append(f"{where or 'the file'}: {what}")
    more = error.error_count() - shown
    return "; ".join(lines) + (f" (and {more} more problems)" if more > 0 else "")
