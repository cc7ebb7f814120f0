"""Export and import of one conversation as a JSON file, and the strict check of an imported one.

The file (format version 2):

    {"format": "composite-demo-conversation", "version": 2,
     "title": str, "page": str, "settings": {...},
     "created_at": ISO 8601 with time zone, "updated_at": the same (informative; an import is updated now),
     "messages": [OpenAI chat messages, Message.to_openai(): what any OpenAI-compatible tool can replay; the
                  branch of the conversation on screen only],
     "metadata": [one record per message, app/storage/schema.py: everything else (metrics, tool status,
                  attachments with base64 data, display text, ...), and the versions: a record's `versions` are
                  the other branches of the conversation from that message on (earlier edits of a user message,
                  earlier answers to one), each a list of records headed by its own message, which may hold
                  versions further on; its `version_index` is the place of the branch shown among them]}

Version 1 is the same without versions (no `versions` or `version_index` in a record); both are imported.

`settings.tool_policies` are preferences, not permissions: only those that make a tool ask first or never run are
imported (app/tools/policy.py, imported_policies); a tool the file sets to run without asking keeps its default.

`metadata` is optional: without it the messages are read as plain OpenAI messages. With it, it is what the import
restores, and it must match `messages` in length and roles.

Everything is checked before anything is saved, so that what is imported is something the pages can show: each
field's type (no "1" for 1, no list for a string, no unknown key; `settings` as in app/storage/schema.py), images
that are pictures, and tool calls that hang together: only assistant messages make calls, and along each branch (the
messages from the first one through the chosen versions, each a conversation of its own) each call has an id no
other call of that branch has, and each tool message answers a call made before it, once. Versions are bounded:
they nest at most MAX_VERSION_DEPTH deep, a version's first message holds none of its own (they are all listed where
it replaces the others), `version_index` is a place among them, and the conversation with all of its versions holds
at most MAX_ALL_MESSAGES messages; a file nested deeper than the JSON parser's limit is refused before anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from app.domain.conversation import Message
from app.domain.media import ImageError, sniff_mime
from app.storage.codec import MAX_TITLE_CHARS, encode_message
from app.storage.errors import ImportRejected
from app.storage.records import StoredConversation
from app.storage.schema import MessageRecord, SettingsRecord, describe
from app.tools.policy import imported_policies

FORMAT = "composite-demo-conversation"
FORMAT_VERSION = 2
MAX_IMPORT_BYTES = 50 * 1024 * 1024
MAX_MESSAGES = 10_000  # in the branch shown
MAX_ALL_MESSAGES = 50_000  # in the conversation and all of its versions together
# A record nested this deep in versions sits about 3 + 3 * 40 levels deep in the file; with tool-call arguments
# (at most 64 levels, app/limits/json_limits.py) below it that stays under the JSON parser's own limit of 200 levels.
MAX_VERSION_DEPTH = 40
_ERRORS_SHOWN = 3
_BUDGET = "import_budget"


def export_document(stored: StoredConversation) -> dict[str, Any]:
    """The conversation as a JSON-able dict in the format above. Its settings as the pages use them (a key the
    import would refuse, e.g. a widget's None, is left out, as opening the conversation leaves it out)."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "title": stored.title,
        "page": stored.page,
        "settings": SettingsRecord.usable(stored.settings)[0],
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
    # Tools the file set to run without asking: left at their defaults (an import carries no permissions).
    not_granted: list[str] = field(default_factory=list)


def parse_import(raw: bytes) -> ImportedConversation:
    """The conversation in an exported file; ImportRejected says what is wrong and where."""
    if len(raw) > MAX_IMPORT_BYTES:
        raise ImportRejected(f"the file is {len(raw):,} bytes; at most {MAX_IMPORT_BYTES // 2**20} MB "
                             f"({MAX_IMPORT_BYTES:,} bytes) can be imported")
    try:
        try:
            document = ExportFile.model_validate_json(raw, context={_BUDGET: _Budget()})
        except ValidationError as exc:
            raise ImportRejected(_too_deep(exc) or describe(exc, shown=_ERRORS_SHOWN)) from None
        except _TooMany as exc:
            raise ImportRejected(str(exc)) from None
        messages = _messages(document)
        source = "messages" if document.metadata is None else "metadata"  # what the import restored them from
        _check_branches(messages, source)
    except ImportRejected as exc:
        raise ImportRejected(_shortened(str(exc))) from None
    settings = document.settings.model_dump(exclude_unset=True)
    not_granted: list[str] = []
    if "tool_policies" in settings:
        settings["tool_policies"], not_granted = imported_policies(settings["tool_policies"])
    return ImportedConversation(document.title, document.page, settings, document.created_at, messages, not_granted)


_VERSION_STEPS = re.compile(r"(?:\.versions\[\d+\]\[\d+\]){6,}")
_VERSION_STEP = re.compile(r"\.versions\[\d+\]\[\d+\]")


def _shortened(problem: str) -> str:
    """Places deep in versions with the middle of their path left out: `metadata[0].versions[0][1].versions[1][1]
    ...(36 more levels)....versions[0][1].versions[0][0]`."""
    def shorten(run: re.Match[str]) -> str:
        steps = _VERSION_STEP.findall(run.group())
        return "".join(steps[:2]) + f"...({len(steps) - 4} more levels)..." + "".join(steps[-2:])

    return _VERSION_STEPS.sub(shorten, problem)


def _too_deep(error: ValidationError) -> str | None:
    """The parser's refusal of deep nesting, said plainly (it stops at its limit: a hostile file costs nothing)."""
    first = error.errors(include_url=False)[0]
    if first["type"] != "json_invalid" or "recursion limit exceeded" not in first["msg"]:
        return None
    place = re.search(r"line \d+ column \d+", first["msg"])
    return (f"the file: nested too deeply{' at ' + place.group() if place else ''} (JSON may nest at most 200 "
            f"levels; versions at most {MAX_VERSION_DEPTH} deep)")


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

    @model_validator(mode="before")
    @classmethod
    def _counted(cls, data: Any, info: ValidationInfo) -> Any:
        budget = info.context.get(_BUDGET) if isinstance(info.context, dict) else None
        if budget is not None:
            budget.openai += 1
            if budget.openai > MAX_MESSAGES:
                raise _TooMany(f"messages: more than {MAX_MESSAGES:,} messages; at most that many can be imported")
        return data


class _TooMany(Exception):
    """Not a ValueError: pydantic lets it through, so validation stops at once instead of going on to build (and
    collect an error for) every further message of a hostile file."""


@dataclass
class _Budget:
    """What the records of one file have used so far (a validation context: records are validated outside in)."""

    messages: int = 0  # records in `metadata`, versions included
    shown: int = 0  # records in `metadata` itself
    openai: int = 0  # OpenAI messages in `messages`
    depth: int = 0  # of the record being validated: 0 for the conversation's own, 1 inside their versions, ...
    current: Any = None  # the record being validated (its input)


class ImportedRecord(MessageRecord):
    """A message record of an imported file: the versions, as deep and as many as MAX_VERSION_DEPTH and
    MAX_ALL_MESSAGES allow, counted as the records are validated, so that a hostile file is refused before it
    costs more than that (what the app reads back from its own database is not counted)."""

    # Records of this class inside (lists are invariant, hence the ignore: each is a MessageRecord all the same).
    versions: list[Annotated[list[ImportedRecord], Field(min_length=1)]] = Field(  # type: ignore[assignment]
        default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _within_budget(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        budget = info.context.get(_BUDGET) if isinstance(info.context, dict) else None
        # pydantic calls this twice for a record it reaches from outside the recursion (the file's metadata): once
        # is counted.
        if budget is None or data is budget.current:
            return handler(data)
        budget.messages += 1
        budget.shown += budget.depth == 0
        if budget.shown > MAX_MESSAGES:
            raise _TooMany(f"metadata: more than {MAX_MESSAGES:,} messages; at most that many can be imported")
        if budget.messages > MAX_ALL_MESSAGES:
            raise _TooMany(f"metadata: the conversation and its versions hold more than {MAX_ALL_MESSAGES:,} "
                           "messages together; at most that many can be imported")
        if budget.depth > MAX_VERSION_DEPTH:
            raise ValueError(f"versions nest at most {MAX_VERSION_DEPTH} deep")
        outer, budget.current = budget.current, data
        budget.depth += 1
        try:
            return handler(data)
        finally:
            budget.depth -= 1
            budget.current = outer


class ExportFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    format: Literal["composite-demo-conversation"]
    version: Literal[1, 2]
    title: str = Field(default="", max_length=MAX_TITLE_CHARS)
    page: str = Field(min_length=1, max_length=64)
    settings: SettingsRecord = Field(default_factory=SettingsRecord)
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None
    messages: list[OpenAIMessage] = Field(max_length=MAX_MESSAGES)
    metadata: list[ImportedRecord] | None = Field(default=None, max_length=MAX_MESSAGES)


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
        if document.version == 1 and record.versions:
            raise ImportRejected(f"metadata[{index}].versions: format version 1 has no versions (this file says "
                                 "version 1)")
    return [_untraced(record.to_message()) for record in document.metadata]


def _untraced(message: Message) -> Message:
    """`message` (and its versions) without trace ids: a trace is its writer's process's, and an imported id must
    not open whatever trace of another user's bears it there (app/telemetry/timeline.py)."""
    message.trace_id = ""
    for version in message.versions:
        for other in version:
            _untraced(other)
    return message


def _check_branches(messages: list[Message], source: str) -> None:
    """Every message's pictures, and the tool calls of each branch on its own: a branch is the messages from the
    first through chosen versions, and a version replaces the rest of the branch it is a version in. One walk over
    every message, depth first, with one set of calls that each branch adds to and takes its own calls out of again
    when it is done (linear in the messages, however many branches share their beginning)."""
    made: dict[str, str] = {}  # call id -> where the call was made, on the branch being walked
    answered: dict[str, str] = {}  # call id -> the tool message that answered it, on the branch being walked

    def walk(branch: list[Message], where: str, is_version: bool) -> None:
        calls: list[str] = []  # this branch's own, taken out at its end
        answers: list[str] = []
        for index, message in enumerate(branch):
            here = f"{where}[{index}]"
            if message.versions and is_version and index == 0:
                raise ImportRejected(f"{here}.versions: a version's first message holds no versions (they are all "
                                     "listed with the message it replaces)")
            for number, version in enumerate(message.versions):  # each from the branch as it is before `message`
                walk(version, f"{here}.versions[{number}]", True)
            _check_images(message, here)
            _check_tool_calls(message, here, made, answered)
            calls.extend(call.id for call in message.tool_calls)
            if message.role == "tool" and message.tool_call_id:
                answers.append(message.tool_call_id)
        for call_id in calls:
            del made[call_id]
        for call_id in answers:
            del answered[call_id]

    walk(messages, source, False)


def _check_images(message: Message, where: str) -> None:
    """A picture is a PNG, JPEG, WebP or GIF (by its first bytes, as the pages test what they show)."""
    for number, attachment in enumerate(message.attachments):
        if attachment.kind == "image" and attachment.data:
            try:
                sniff_mime(attachment.data)
            except ImageError as exc:
                raise ImportRejected(f"{where}.attachments[{number}].data: {exc}") from None


def _check_tool_calls(message: Message, where: str, made: dict[str, str], answered: dict[str, str]) -> None:
    """Ids unique and consistent: a tool message answering no call, or a call answered twice, would show a result
    under the wrong call (or none) and send the model a conversation no backend accepts."""
    if message.tool_calls and message.role != "assistant":
        raise ImportRejected(f"{where}.tool_calls: only assistant messages make tool calls")
    if message.tool_call_id is not None and message.role != "tool":
        raise ImportRejected(f"{where}.tool_call_id: only tool messages answer a tool call")
    for number, call in enumerate(message.tool_calls):
        if not call.id:
            raise ImportRejected(f"{where}.tool_calls[{number}].id: a tool call needs an id")
        if call.id in made:
            raise ImportRejected(f"{where}.tool_calls[{number}].id: {_short(call.id)} is already the id of a call "
                                 f"in {made[call.id]}; each call needs its own")
        made[call.id] = where
    if message.role == "tool":
        call_id = message.tool_call_id
        if not call_id:
            raise ImportRejected(f"{where}.tool_call_id: a tool message must name the call it answers")
        if call_id not in made:
            raise ImportRejected(f"{where}.tool_call_id: {_short(call_id)} answers no tool call made before it")
        if call_id in answered:
            raise ImportRejected(f"{where}.tool_call_id: call {_short(call_id)} was already answered in "
                                 f"{answered[call_id]}")
        answered[call_id] = where


def _short(text: str, limit: int = 60) -> str:
    """A value from the file, quoted and cut: the message is for reading, however long an id the file holds."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
