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
                 "dropped_messages": int, "thinking_tokens": int, "thinking_time_s": float | null},
     "error": str, "tool_status": "ok" | "failed" | "stopped", "duration_s": float, "display_text": str,
     "attachments": [{"kind": "image" | "document", "name": str, "note": str, "text": str,
                      "data": standard base64 of the bytes}],
     "thinking": str}                                        # a reasoning model's thought
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

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
