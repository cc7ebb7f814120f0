"""Drawing a stored conversation: message bubbles, tool-call cards with their results, pictures, the metrics line
and the collapsed thought. The live turn (app/frontends/streamlit/live_turn.py) draws with the same pieces, so a
finished answer looks the same while it streams and after the next rerun."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.agent.loop import ToolSettings, pending_calls
from app.domain.conversation import Conversation, Message, ToolCall
from app.frontends.streamlit import (
    approvals,
    history_window,
    knowledge_chat,
    message_actions,
    persistence,
    shown_images,
    state,
)
from app.frontends.streamlit.line_breaks import keep_line_breaks
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.frontends.streamlit.tool_cards import arguments, card_label, card_state, result_body, tool_images
from app.tools.browser import cited_sources

THOUGHT_ICON = ":material/psychology:"


@persistence.shown_safely  # a stored conversation that cannot be drawn says why instead of stopping the page
def render_history(page: str, conversation: Conversation, transform: Callable[[str], str] | None = None,
                   tools: ToolSettings | None = None) -> None:
    """User messages in their own bubbles; everything the assistant did for one question (answers, tool calls and
    their results) in one assistant bubble. Each bubble ends with its actions
    (app/frontends/streamlit/message_actions.py). Calls that wait for the user show as approval cards
    (app/frontends/streamlit/approvals.py) over the page's `tools`. A long conversation is drawn from its most
    recent messages, earlier ones on demand, and most messages offer one light button for their actions
    (app/frontends/streamlit/history_window.py)."""
    state.forget_page_change()  # this run draws the change already
    results = {m.tool_call_id: m for m in conversation.messages if m.role == "tool"}
    waiting = pending_calls(conversation)
    messages = conversation.messages
    conversation_id = persistence.binding(page).conversation_id
    index = history_window.first_drawn(page, conversation_id, conversation)
    if index:
        history_window.show_earlier(page, conversation_id, index)
    while index < len(messages):
        message = messages[index]
        if message.role in ("user", "system"):
            with render_message(message):
                if message.role == "user":
                    _actions(page, conversation_id, conversation, index, index, False)
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
            _actions(page, conversation_id, conversation, head, index - 1, index == len(messages))


@st.fragment
def _actions(page: str, conversation_id: str | None, conversation: Conversation, head: int, last: int,
             last_bubble: bool) -> None:
    """Under a bubble (messages `head`..`last`): its row of actions, or the one button that opens it. A fragment:
    opening the row, the Copy and Edit boxes and typing an edit redraw this row alone; an action that changes the
    conversation (Send an edit, Regenerate, another version) reruns the whole page from here
    (app/frontends/streamlit/message_actions.py), since its callback cannot."""
    state.rerun_if_page_changed()
    if not history_window.actions_open(page, conversation_id, conversation, head, last_bubble):
        history_window.more_button(page, conversation_id, head)
    elif conversation.messages[head].role == "user":
        message_actions.user_actions(page, conversation, head)
    else:
        message_actions.answer_actions(page, conversation, head, last)


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
                columns[index % len(columns)].image(shown_images.shown(image.data), caption=safe_markdown(image.name),
                                                    width="content")
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
    for document in (a for a in message.attachments if a.kind in ("document", "passages")):
        if knowledge_chat.render_knowledge(document):
            continue
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
