"""MCP prompts as the pages offer them: which ones can be filled in by a form, the values checked against the
prompt's declared arguments, and a filled prompt's messages as the text that goes into the message box.

Everything here comes from the server and is not trusted: a prompt may declare hundreds of arguments, the same
name twice, or send back megabytes; such a prompt is refused with a reason, or its text cut with a note. No
Streamlit and no I/O here (the connection fetches, app/frontends/streamlit/mcp_library.py draws).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mcp import types

MAX_ARGUMENTS = 20  # a form longer than this is no longer a prompt a person fills in
MAX_ARGUMENT_NAME_CHARS = 100
MAX_VALUE_CHARS = 10_000  # one argument's value, as typed
MAX_PROMPT_CHARS = 100_000  # the text put into the message box


class PromptError(ValueError):
    """A prompt that cannot be used, or values that do not fit it; the message says why and what to do."""


@dataclass(frozen=True)
class Argument:
    """One argument of a prompt, as its form field shows it."""

    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class PromptText:
    """A filled prompt as the message box takes it: its text, and what was left out of it (pictures, audio, ...)."""

    text: str
    notes: tuple[str, ...] = ()


def arguments_of(prompt: types.Prompt) -> tuple[Argument, ...]:
    """The prompt's declared arguments, in order. PromptError when they cannot be offered as a form: more than
    MAX_ARGUMENTS, or a name that is empty, too long or declared twice."""
    declared = prompt.arguments or []
    if len(declared) > MAX_ARGUMENTS:
        raise PromptError(f"it declares {len(declared):,} arguments; at most {MAX_ARGUMENTS} can be filled in here.")
    seen: set[str] = set()
    arguments = []
    for argument in declared:
        name = argument.name
        if not name.strip() or len(name) > MAX_ARGUMENT_NAME_CHARS:
            raise PromptError(f"it declares an argument with an empty or over-long name ({len(name)} characters).")
        if name in seen:
            raise PromptError(f"it declares the argument {name!r} twice.")
        seen.add(name)
        arguments.append(Argument(name, argument.description or "", bool(argument.required)))
    return tuple(arguments)


def filled(prompt: types.Prompt, values: Mapping[str, str]) -> dict[str, str]:
    """The arguments to send: the non-empty values of the declared arguments (an optional one left empty is not
    sent). PromptError naming the required arguments left empty, or a value that is too long."""
    arguments = arguments_of(prompt)
    missing = [a.name for a in arguments if a.required and not str(values.get(a.name) or "").strip()]
    if missing:
        raise PromptError(f"fill in {', '.join(repr(name) for name in missing)}: "
                          f"{'it is' if len(missing) == 1 else 'they are'} required.")
    sent = {a.name: str(values[a.name]) for a in arguments if str(values.get(a.name) or "").strip()}
    for name, value in sent.items():
        if len(value) > MAX_VALUE_CHARS:
            raise PromptError(f"{name!r} is {len(value):,} characters long; at most {MAX_VALUE_CHARS:,} are sent.")
    return sent


def prompt_text(result: types.GetPromptResult) -> PromptText:
    """The messages of a filled prompt as one text: the user's messages as written, the assistant's (a prompt may
    show an example answer) marked as such; embedded text resources as their text. Pictures, audio and binary
    resources cannot go into a message box: each is a note. Cut to MAX_PROMPT_CHARS, with a note."""
    parts: list[str] = []
    notes: list[str] = []
    for message in result.messages:
        text = _text(message.content, notes)
        if text:
            parts.append(text if message.role == "user" else f"Assistant: {text}")
    text = "\n\n".join(parts)
    if len(text) > MAX_PROMPT_CHARS:
        notes.append(f"the prompt's text was cut to its first {MAX_PROMPT_CHARS:,} of {len(text):,} characters.")
        text = text[:MAX_PROMPT_CHARS]
    return PromptText(text, tuple(notes))


def _text(content: types.ContentBlock, notes: list[str]) -> str:
    if isinstance(content, types.TextContent):
        return content.text
    if isinstance(content, types.EmbeddedResource):
        if isinstance(content.resource, types.TextResourceContents):
            return content.resource.text
        notes.append(f"a binary resource ({content.resource.mime_type or 'no type given'}) was left out.")
        return ""
    if isinstance(content, types.ResourceLink):
        return f"[resource {content.title or content.name} <{content.uri}>]"
    kind = "a picture" if isinstance(content, types.ImageContent) else "a sound" \
        if isinstance(content, types.AudioContent) else f"a {content.type} block"
    notes.append(f"{kind} in the prompt was left out: the message box takes text only.")
    return ""
