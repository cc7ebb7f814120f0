"""The stored and exported shape of a message, as pydantic models: one definition validates what is read back
from the database and what an imported file holds, and reports where a value is wrong.

A message record is a JSON object; fields at their default are left out when written:

    {"role": "user" | "assistant" | "tool" | "system",
     "content": str,
     "tool_calls": [{"id": str, "name": str, "arguments": {...},
                     "edited_from": {...},                 # the model's arguments, where the user edited them
                     "asked_at": float}],                  # when the user was asked to decide on it (epoch s)
     "tool_call_id": str, "name": str,                     # tool results
     "metrics": {"prompt_tokens": int, "completion_tokens": int, "time_to_first_token_s": float | null,
                 "tokens_per_second": float | null, "total_time_s": float,
                 "finish_reason": "stop" | "length" | "cancelled" | "tool_calls" | "error" | null,
                 "dropped_messages": int, "thinking_tokens": int, "thinking_time_s": float | null,
                 "cached_tokens": int},
     "error": str, "tool_status": "ok" | "failed" | "stopped" | "denied", "duration_s": float, "display_text": str,
     "structured": {...},                                    # a tool's result as a JSON object, where it gave one
     "attachments": [{"kind": "image" | "document" | "passages", "name": str, "note": str, "text": str,
                      "data": standard base64 of the bytes,
                      "collection": str, "document_id": str,  # a long document: where it is in knowledge
                      "sources": [{"number": int, "document": str, "location": str, "text": str,
                                   "passage_id": int | null}]}],  # "passages": what was retrieved
     "thinking": str,                                        # a reasoning model's thought
     "model": str,                                           # the model that wrote an answer
     "feedback": {"rating": "up" | "down", "comment": str},  # the user's thumbs on an answer
     "trace_id": str,                                        # its OpenTelemetry trace (32 hex digits)
     "versions": [[message record, ...], ...],               # the other versions from this message on
     "version_index": int}                                   # this message's place among all of them

`versions` holds the other versions of the conversation from this message on (an earlier edit of a user message,
an earlier answer to one; app/domain/conversation.py), each a non-empty list of message records headed by that version's
own message, which may hold versions of its own further on; `version_index` (0 to len(versions)) is where this
message's own branch stands among them. Both are left out when there are none.

A conversation's settings (what app/frontends/streamlit/persistence.py restores into the page's widgets when it is
opened):

    {"system_prompt": str, "tool_choice": str,              # each optional
     "tool_policies": {tool name: "auto" | "ask" | "never"}} # the user's run policies (app/tools/policy.py)

A user's preferences (the last settings they chose, restored after a refresh; the `preferences` table):

    {"backend": str, "system_prompt": str, "temperature": float, "top_p": float, "top_k": int,
     "repetition_penalty": float, "max_new_tokens": int, "seed": int | null, "thinking": str,
     "dark_mode": bool}                                       # each optional
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from app.domain.conversation import (
    MAX_FEEDBACK_COMMENT_CHARS,
    MAX_MODEL_NAME,
    AnswerMetrics,
    Attachment,
    Feedback,
    Message,
    Source,
    ToolCall,
)
from app.tools.policy import RunPolicy


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


class _OptionalSettings(Record):
    """Settings whose every key is optional: a key is left out when it was not set, and none may be null unless its
    type says so (a widget cannot show None)."""

    _where: ClassVar[str] = "settings"  # how `usable` names them in its problems

    @classmethod
    def usable(cls, settings: Any) -> tuple[dict[str, Any], list[str]]:
        """The settings that are valid one by one, as their type says (an int given for a float is a float), and what
        is wrong with the others (`where: what`): unknown keys and wrong values are dropped, so that what is kept can
        be used whatever the rest holds."""
        if not isinstance(settings, dict):
            return {}, [f"{cls._where}: must be an object, not {type(settings).__name__}"]
        usable: dict[str, Any] = {}
        problems: list[str] = []
        for name, value in settings.items():
            try:
                valid = cls.model_validate({name: value})
            except ValidationError as exc:
                problems.append(describe(exc, cls._where))
            else:
                usable[name] = getattr(valid, name)
        return usable, problems


class SettingsRecord(_OptionalSettings):
    """A conversation's settings: a stored conversation opens with its valid settings (`usable`), the page's
    defaults for the rest."""

    system_prompt: str = Field(default="", max_length=100_000)
    tool_choice: str = Field(default="", max_length=200)  # "auto", "none", "required" or a tool's name
    # The user's run policy per tool (registry name -> auto | ask | never), where it differs from the default.
    tool_policies: dict[Annotated[str, Field(max_length=200)], RunPolicy] = Field(default_factory=dict,
                                                                                   max_length=500)


class PreferencesRecord(_OptionalSettings):
    """A user's last settings, restored into the sidebar after a refresh. The defaults here are never used: only
    the keys that were set are stored and given back. Ranges are GenerationParams' (app/domain/generation_params.py)."""

    _where: ClassVar[str] = "preferences"

    backend: str = Field(default="", max_length=64)
    system_prompt: str = Field(default="", max_length=100_000)
    temperature: float = Field(default=0.7, ge=0.0, le=5.0)
    top_p: float = Field(default=0.9, gt=0.0, le=1.0)
    top_k: int = Field(default=50, ge=0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=5.0)
    max_new_tokens: int = Field(default=512, ge=1)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    thinking: str = Field(default="", max_length=64)
    dark_mode: bool = False


class ToolCallRecord(Record):
    id: str
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    edited_from: dict[str, Any] | None = None  # optional: records written before calls could be edited have none
    asked_at: float | None = None


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


class SourceRecord(Record):
    number: int = Field(ge=1)
    document: str
    location: str
    text: str
    passage_id: int | None = None


class AttachmentRecord(Record):
    kind: Literal["image", "document", "passages"]
    name: str
    note: str = ""
    text: str = ""
    data: Base64Bytes = b""
    collection: str = ""  # optional: records written before knowledge have none
    document_id: str = ""
    sources: list[SourceRecord] = Field(default_factory=list)


class FeedbackRecord(Record):
    rating: Literal["up", "down"]
    comment: str = Field(default="", max_length=MAX_FEEDBACK_COMMENT_CHARS)


class MessageRecord(Record):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    metrics: MetricsRecord | None = None
    error: str | None = None
    tool_status: Literal["ok", "failed", "stopped", "denied"] | None = None
    duration_s: float | None = None
    display_text: str | None = None
    structured: dict[str, Any] | None = None  # optional: records written before structured results have none
    attachments: list[AttachmentRecord] = Field(default_factory=list)
    thinking: str = ""
    model: str = Field(default="", max_length=MAX_MODEL_NAME)
    feedback: FeedbackRecord | None = None
    trace_id: str = Field(default="", max_length=32, pattern=r"^[0-9a-f]*$")
    # The other versions from this message on, each headed by its own message; and this message's place among them.
    versions: list[Annotated[list[MessageRecord], Field(min_length=1)]] = Field(default_factory=list)
    version_index: int = 0

    @field_validator("version_index")
    @classmethod
    def _among_the_versions(cls, value: int, info: ValidationInfo) -> int:
        versions = info.data.get("versions")
        if versions is not None and not 0 <= value <= len(versions):
            if not versions:
                raise ValueError(f"{value} is out of range: with no other versions it can only be 0")
            others = f"{len(versions)} other version" + ("s" if len(versions) > 1 else "")
            raise ValueError(f"{value} is out of range: this message and its {others} are places 0 to "
                             f"{len(versions)}")
        return value

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
            "feedback": Feedback(**self.feedback.__dict__) if self.feedback else None,
            "attachments": [Attachment(**{**attachment.__dict__, "sources": [
                Source(**source.__dict__) for source in attachment.sources]}) for attachment in self.attachments],
            "versions": [[record.to_message() for record in version] for version in self.versions],
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
