"""The prompts and resources of the connected MCP servers, in the Tools pages' sidebar: a prompt, its arguments
filled in a small form, goes into the message box as text to edit and send; a resource (or a filled resource
template) is attached to the next message the user sends, like an uploaded file.

Everything a server says (names, descriptions, the prompt's text) is shown as plain text (mcp_settings.plain),
never as markdown. The requests run on the MCP manager's loop (app/mcp_client/manager.py) and a failure is a
notice under the form; the page stays up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import streamlit as st
from mcp import types

from app.domain.conversation import Attachment
from app.frontends.streamlit import mcp_settings, sidebar
from app.frontends.streamlit.mcp_settings import plain
from app.mcp_client import ServerConnection
from app.mcp_client.prompts import PromptError, arguments_of, filled, prompt_text
from app.mcp_client.resources import (
    ResourceError,
    attachments_of,
    check_declared_size,
    expand,
    template_variables,
)
from app.tools.tool_registry import ToolError

MAX_PENDING = 8  # resources waiting for the next message
_DESCRIPTION_CHARS = 300  # of a server's description, under its prompt or resource
_LABEL_CHARS = 80
_SEPARATOR = "\x1f"  # between a server's name and an item's name or URI in an option's id


@dataclass(frozen=True)
class Submitted:
    """The message box's value with the resources attached to it: what chat_page.user_message reads."""

    text: str
    files: list[Any] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)


def render(page: str, input_key: str, submitted: Any) -> Any:
    """The "MCP prompts and resources" section of the page's sidebar (nothing when no connected server offers
    any). Returns `submitted` (st.chat_input's value, under `input_key`) with the resources the user attached
    to it; they are then forgotten."""
    mcp = mcp_settings.manager()
    connections = mcp_settings.connections()
    prompts = mcp.list_prompts(connections)
    resources = mcp.list_resources(connections)
    templates = mcp.list_resource_templates(connections)
    pending = _pending(page)
    notice = st.session_state.pop(_key(page, "notice"), None)
    if prompts.items or resources.items or templates.items or pending or notice:
        with sidebar.page_section(), st.expander("MCP prompts and resources", expanded=bool(notice or pending)):
            for problem in [*prompts.problems, *resources.problems, *templates.problems]:
                st.warning(plain(problem), icon=":material/warning:")
            if prompts.items:
                _prompts(page, input_key, prompts.items)
            if resources.items or templates.items:
                _resources(page, resources.items, templates.items)
            _attached(page, pending)
            if notice:
                kind, text = notice
                (st.success if kind == "success" else st.warning if kind == "warning" else st.error)(plain(text))
    if submitted is None or not pending:
        return submitted
    st.session_state[_key(page, "attached")] = []
    if isinstance(submitted, str):
        return Submitted(submitted, [], list(pending))
    text = getattr(submitted, "text", "") or ""
    return Submitted(text, list(getattr(submitted, "files", []) or []), list(pending))


# ----- prompts ----------------------------------------------------------------------------------------------------

def _prompts(page: str, input_key: str, items: Sequence[tuple[ServerConnection, types.Prompt]]) -> None:
    found = {_id(connection, prompt.name): (connection, prompt) for connection, prompt in items}
    choice = st.selectbox("Prompt", list(found), key=_key(page, "prompt"), index=None,
                          placeholder="Choose a server's prompt",
                          format_func=lambda choice: _label(found[choice][0], found[choice][1].title
                                                            or found[choice][1].name) if choice in found else "")
    if choice not in found:
        return
    connection, prompt = found[choice]
    if prompt.description:
        st.caption(plain(_cut(prompt.description)))
    try:
        arguments = arguments_of(prompt)
    except PromptError as exc:
        st.warning(plain(f"This prompt cannot be used: {exc}"), icon=":material/warning:")
        return
    with st.form(_key(page, "prompt_form"), border=False):
        for argument in arguments:
            st.text_input(plain(argument.name) + (" \\*" if argument.required else ""),
                          key=_key(page, "argument", choice, argument.name),
                          help=plain(_cut(argument.description)) or None)
        st.form_submit_button("Put into the message box", key=_key(page, "insert"), on_click=_insert,
                              args=(page, input_key, connection, prompt, choice),
                              help="The prompt's text goes into the message box, to read, edit and send.")


def _insert(page: str, input_key: str, connection: ServerConnection, prompt: types.Prompt, choice: str) -> None:
    """Fill the prompt on its server and put its text into the message box (a value st.chat_input shows, unsent)."""
    state = st.session_state
    try:
        arguments = filled(prompt, {argument.name: str(state.get(_key(page, "argument", choice, argument.name))
                                                       or "") for argument in arguments_of(prompt)})
        text = prompt_text(mcp_settings.manager().get_prompt(connection, prompt.name, arguments))
    except (PromptError, ToolError) as exc:
        _notice(page, "error", f"The prompt {prompt.name} could not be used: {exc}")
        return
    if not text.text.strip():
        _notice(page, "warning", f"The prompt {prompt.name} has no text to put into the message box. "
                                 + " ".join(text.notes))
        return
    state[input_key] = text.text
    notes = f" ({' '.join(text.notes)})" if text.notes else ""
    _notice(page, "warning" if text.notes else "success",
            f"The prompt {prompt.name} is in the message box: edit it if you like, then send it.{notes}")


# ----- resources --------------------------------------------------------------------------------------------------

def _resources(page: str, resources: Sequence[tuple[ServerConnection, types.Resource]],
               templates: Sequence[tuple[ServerConnection, types.ResourceTemplate]]) -> None:
    found = {_id(connection, resource.uri): (connection, resource) for connection, resource in resources}
    shaped = {_id(connection, template.uri_template): (connection, template) for connection, template in templates
              if template_variables(template) is not None}
    options = [*found, *shaped]

    def label(choice: str) -> str:
        if choice in found:
            connection, resource = found[choice]
            kind = f" ({resource.mime_type})" if resource.mime_type else ""
            return _label(connection, (resource.title or resource.name) + kind)
        connection, template = shaped[choice]
        return _label(connection, f"{template.title or template.name} (template)")

    choice = st.selectbox("Resource", options, key=_key(page, "resource"), index=None,
                          placeholder="Choose a resource to attach", format_func=lambda c: label(c) if c in options
                          else "")
    if choice in found:
        connection, resource = found[choice]
        st.caption(plain(_cut(f"{resource.uri}" + (f" · {resource.description}" if resource.description else ""))))
        st.button("Attach to my next message", key=_key(page, "attach"), on_click=_attach,
                  args=(page, connection, resource.uri, resource.title or resource.name, resource))
    elif choice in shaped:
        connection, template = shaped[choice]
        st.caption(plain(_cut(template.uri_template + (f" · {template.description}" if template.description
                                                       else ""))))
        with st.form(_key(page, "template_form"), border=False):
            for name in template_variables(template) or ():
                st.text_input(plain(name) + " \\*", key=_key(page, "variable", choice, name))
            st.form_submit_button("Attach to my next message", key=_key(page, "attach_template"),
                                  on_click=_attach_template, args=(page, connection, template, choice))


def _attach_template(page: str, connection: ServerConnection, template: types.ResourceTemplate, choice: str) -> None:
    values = {name: str(st.session_state.get(_key(page, "variable", choice, name)) or "")
              for name in template_variables(template) or ()}
    try:
        uri = expand(template, values)
    except ResourceError as exc:
        _notice(page, "error", f"Not attached: {exc}")
        return
    _attach(page, connection, uri, uri)


def _attach(page: str, connection: ServerConnection, uri: str, name: str,
            listed: types.Resource | None = None) -> None:
    """Read the resource and keep it, as attachments, for the next message."""
    pending = _pending(page)
    try:
        if len(pending) >= MAX_PENDING:
            raise ResourceError(f"at most {MAX_PENDING} resources can wait for one message; send it first.")
        if listed is not None:
            check_declared_size(listed)
        attached = attachments_of(mcp_settings.manager().read_resource(connection, uri), name)
    except (ResourceError, ToolError) as exc:
        _notice(page, "error", f"Not attached: {exc}")
        return
    pending.extend(attached.attachments[:MAX_PENDING - len(pending)])
    notes = f" ({' '.join(attached.notes)})" if attached.notes else ""
    _notice(page, "warning" if attached.notes else "success",
            f"{name} will be attached to your next message.{notes}")


def _attached(page: str, pending: list[Attachment]) -> None:
    """What waits for the next message, and a button to drop it."""
    if not pending:
        return
    st.caption("Attached to your next message:")
    for attachment in pending:
        size = f"{len(attachment.text):,} characters" if attachment.kind == "document" else "picture"
        note = f" · {attachment.note}" if attachment.note else ""
        st.caption(plain(f"{attachment.name} ({size}{note})"))
    st.button("Remove the attachments", key=_key(page, "clear"), on_click=_clear, args=(page,))


def _clear(page: str) -> None:
    st.session_state[_key(page, "attached")] = []


# ----- helpers ----------------------------------------------------------------------------------------------------

def _pending(page: str) -> list[Attachment]:
    pending: list[Attachment] = st.session_state.setdefault(_key(page, "attached"), [])
    return pending


def _notice(page: str, kind: str, text: str) -> None:
    st.session_state[_key(page, "notice")] = (kind, text)


def _key(page: str, *parts: str) -> str:
    return ".".join(["mcp.library", page, *parts])


def _id(connection: ServerConnection, name: str) -> str:
    return f"{connection.name}{_SEPARATOR}{name}"


def _label(connection: ServerConnection, name: str) -> str:
    return _cut(f"{connection.name} · {name}", _LABEL_CHARS)


def _cut(text: str, limit: int = _DESCRIPTION_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
