"""A tool call's card, as the history, the live turn and an approval draw it: its title (tool, outcome, result in one
line, time), its arguments (edited or as the model wrote them), its result and its pictures."""

from __future__ import annotations

import json
from typing import Any, Literal

import streamlit as st

from app.domain.conversation import Message, ToolCall
from app.frontends.streamlit import shown_images
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown

_SUMMARY_CHARS = 80


def card_label(call: ToolCall, result: Message | None) -> str:
    """A finished call's card title: the tool, how it ended, its result in one line (so a collapsed card still
    shows it) and how long it ran."""
    if result is None:
        return safe_label(f"{call.name} · no result")
    took = f" · {result.duration_s:.2f} s" if result.duration_s is not None else ""
    outcome = {"stopped": " · stopped", "failed": " · failed", "denied": " · declined"}.get(result.tool_status or "",
                                                                                          "")
    if call.edited_from is not None:
        outcome += " · edited"
    return safe_label(f"{call.name}{outcome} → {result_summary(result)}{took}")


def result_summary(result: Message) -> str:
    """A tool result in one short line: its first non-empty line, cut."""
    text = (result.display_text or result.content).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")
    more = len(first) > _SUMMARY_CHARS or "\n" in text
    return first[:_SUMMARY_CHARS].rstrip() + ("…" if more else "")


def card_state(result: Message | None) -> Literal["complete", "error"]:
    return "complete" if result is not None and result.tool_status == "ok" else "error"


def arguments(call: ToolCall) -> None:
    """A call's arguments, in its card; where the user edited them, what ran and, below, what the model wrote."""
    st.caption("Arguments, as you edited them" if call.edited_from is not None else "Arguments")
    _arguments_code(call.arguments)
    if call.edited_from is not None:
        st.caption("The model's arguments")
        _arguments_code(call.edited_from)


def _arguments_code(arguments: dict[str, Any]) -> None:
    code = arguments.get("code")
    if list(arguments) == ["code"] and isinstance(code, str):
        st.code(code, language="python", wrap_lines=True)  # a code tool: show the program, not escaped JSON
    else:
        st.code(json.dumps(arguments, indent=2, ensure_ascii=False), language="json", wrap_lines=True)


def result_body(result: Message) -> None:
    """A call's result, in its card: the full output when the model read a shortened one, then the structured result
    (where the tool gave one) as data: st.json shows a server's strings as text, never as markdown."""
    st.caption("Result")
    text = result.display_text or result.content
    st.code(text, language="text", wrap_lines=True)
    # An SDK server's plain return value comes structured as {"result": value} too: no need to show it twice.
    if result.structured is not None and result.structured != {"result": text}:
        st.caption("Structured result")
        st.json(result.structured, expanded=2)


def tool_images(message: Message | None) -> None:
    """Plots and generated pictures go in the chat itself, under their card."""
    for attachment in message.attachments if message is not None else []:
        if attachment.kind == "image":
            st.image(shown_images.shown(attachment.data), caption=safe_markdown(attachment.name) or None)
