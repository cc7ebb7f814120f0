"""OpenAI chat messages as the core passes them around: what `Conversation.to_openai` writes, `process_input` hands
to every client, the API server answers with and storage exports.

TypedDicts, so plain dicts at run time (what JSON, Jinja chat templates and the `openai` package take). Ours, not
`openai.types.chat.ChatCompletionMessageParam`: that union has no `reasoning_content`, types a tool message's content
as text parts only and a system message's as text parts too, and narrows on `role` where the core reads `content` and
`tool_calls` from any message. These say what the core itself writes; `Conversation.from_openai` checks what comes
from outside against them.

A chat template's messages (`RenderedPrompt.messages`) are another shape: call arguments as objects, dialect roles
such as GLM-4's `observation`, tools on the system message. `TemplateMessage` names it.
"""

from typing import Any, Literal, NotRequired, Required, TypeAlias, TypedDict

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImageURL(TypedDict):
    url: str  # a data: URL as the core writes it; an http(s) URL only where the API server allows one
    detail: NotRequired[str]


class ImagePart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart: TypeAlias = TextPart | ImagePart


class FunctionCall(TypedDict):
    name: str
    arguments: str  # the arguments as a JSON object's text


class ToolCallMessage(TypedDict):
    """One entry of an assistant message's `tool_calls`."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(TypedDict, total=False):
    """One OpenAI chat message of any role. `content` is text, or for a user message text and image parts;
    `tool_calls` only on an assistant message, `tool_call_id` (and the tool's `name`) only on a tool message;
    `reasoning_content` a reasoning model's thought (read from a server's answer, never sent to a model)."""

    role: Required[Role]
    content: str | list[ContentPart] | None
    tool_calls: list[ToolCallMessage]
    tool_call_id: str
    name: str
    reasoning_content: str


# A message as a chat template reads it (`tokenizer.apply_chat_template`): shaped by the dialect, not by OpenAI.
TemplateMessage: TypeAlias = dict[str, Any]
