"""Drawing a stored conversation: message bubbles, tool-call cards with their results, pictures, the metrics line
and the collapsed thought. The live turn (app/ui/live_turn.py) draws with the same pieces, so a finished answer
looks the same while it streams and after the next rerun."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.agent import ToolSettings, pending_calls
from app.conversation import Conversation, Message, ToolCall
from app.tools.browser import cited_sources
from app.ui import approvals, message_actions, persistence
from app.ui.line_breaks import keep_line_breaks
from app.ui.safe_markdown import safe_label, safe_markdown

THOUGHT_ICON = ":material/psychology:"


@persistence.shown_safely  # a stored conversation that cannot be drawn says why instead of stopping the page
def render_history(page: str, conversation: Conversation, transform: Callable[[str], str] | None = None,
                   tools: ToolSettings | None = None) -> None:
    """User messages in their own bubbles; everything the assistant did for one question (answers, tool calls and
    their results) in one assistant bubble. Each bubble ends with its actions (app/ui/message_actions.py). Calls
    that wait for the user show as approval cards (app/ui/approvals.py) over the page's `tools`."""
    results = {m.tool_call_id: m for m in conversation.messages if m.role == "tool"}
    waiting = pending_calls(conversation)
    messages = conversation.messages
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.role in ("user", "system"):
            with render_message(message):
                if message.role == "user":
                    message_actions.user_actions(page, conversation, index)
            index += 1
            continue
        head, turn_results = index, []
        with st.chat_message("assistant"):
            after_tool = False
            while index < len(messages) and messages[index].role in ("assistant", "tool"):
                if messages[index].role == "assistant":
                    render_answer(messages[index], results, transform, after_tool=after_tool, waiting=waiting)
                    after_tool = bool(messages[index].tool_calls)
                else:
                    turn_results.append(messages[index])
                index += 1
            _sources(turn_results)
            if waiting and index == len(messages):
                approvals.render(page, conversation, waiting, tools)
            message_actions.answer_actions(page, conversation, head, index - 1)


def _sources(tool_results: list[Message]) -> None:
    """Under an answer: links to the web pages its tools read (numbered as the model was told to cite them)."""
    found = cited_sources("\n".join(m.content for m in tool_results))
    if found:
        links = " · ".join(f"[[{n}] {title}]({url})" for n, title, url in found)
        st.caption(safe_markdown("Sources: " + links))


def render_message(message: Message) -> DeltaGenerator:
    """One message in its own bubble, its pictures above its text; the bubble, to add to."""
    bubble = st.chat_message(message.role)
    with bubble:
        if message.images:
            columns = st.columns(min(len(message.images), 4))
            for index, image in enumerate(message.images):
                columns[index % len(columns)].image(image.data, caption=safe_markdown(image.name), width="content")
        render_answer(message, {})
    return bubble


def text_markdown(text: str, *, streaming: bool = False) -> str:
    """A message's text as the page renders it: line breaks as written, nothing that loads a remote resource."""
    return safe_markdown(keep_line_breaks(text), streaming=streaming)


def model_answer_mark() -> None:
    """Above an answer that follows a tool result: the words are the model's, not the tool's."""
    st.caption(":material/smart_toy: The model, after the result:")


def render_answer(
    message: Message, results: dict[str | None, Message], transform: Callable[[str], str] | None = None,
    after_tool: bool = False, waiting: Sequence[ToolCall] = (),
) -> None:
    if message.thinking:
        with st.expander(thought_label(message), icon=THOUGHT_ICON):
            st.markdown(safe_markdown(message.thinking))
    if message.content:
        content = transform(message.content) if transform and message.role == "assistant" else message.content
        if after_tool:
            model_answer_mark()
        st.markdown(text_markdown(content))
    for document in (a for a in message.attachments if a.kind == "document"):
        if not document.text:
            st.warning(safe_markdown(f"{document.name}: {document.note}"), icon=":material/warning:")
            continue
        note = f" · {document.note}" if document.note else ""
        label = f":material/description: {document.name} ({len(document.text):,} characters{note})"
        with st.expander(safe_label(label)):
            st.text(document.text)
    if message.error:
        st.error(safe_markdown(message.error), icon=":material/error:")
    # Same order as while streaming: the generation's metrics, then the cards of the calls it made.
    if message.metrics is not None and message.role == "assistant" and not message.error:
        metrics_caption(message)
    for call in message.tool_calls:
        result = results.get(call.id)
        if result is None and call in waiting:
            continue  # its approval card follows the answer
        with st.status(card_label(call, result), state=card_state(result), expanded=False):
            arguments(call)
            if result is not None:
                result_body(result)
        tool_images(result)


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
            st.image(attachment.data, caption=safe_markdown(attachment.name) or None)


def thought_label(message: Message) -> str:
    """"Thought for 3.2 s · 120 tokens": the collapsed thinking section's title."""
    metrics = message.metrics
    parts = [f"Thought for {metrics.thinking_time_s:.1f} s" if metrics and metrics.thinking_time_s else "Thought"]
    if metrics and metrics.thinking_tokens:
        parts.append(f"{metrics.thinking_tokens} tokens")
    return " · ".join(parts)


def metrics_caption(message: Message) -> None:
    """An answer's metrics line (tokens, speed, prompt size), marked when the user stopped it."""
    assert message.metrics is not None
    summary = safe_markdown(message.metrics.summary())  # an imported conversation's metrics are not ours
    if message.stopped:
        st.caption(f":orange[Stopped] · {summary}")
    else:
        st.caption(summary)
