"""Rendering a conversation (with tool-call cards) and streaming one turn into it."""

from __future__ import annotations

import json
import time
from contextlib import closing

import streamlit as st

from app.agent import (
    AnswerDone,
    Notice,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolSettings,
    TurnDone,
    TurnError,
    Waiting,
    run_turn,
)
from app.clients.base import Client
from app.conversation import Conversation, Message, ToolCall
from app.ui import state
from app.ui.sidebar import SidebarState

_FLUSH_EVERY_S = 0.05  # re-render the growing answer at most 20 times a second


def render_history(conversation: Conversation) -> None:
    """User messages in their own bubbles; everything the assistant did for one question (answers, tool calls and
    their results) in one assistant bubble."""
    results = {m.tool_call_id: m for m in conversation.messages if m.role == "tool"}
    bubble = None
    for message in conversation.messages:
        if message.role in ("user", "system"):
            bubble = None
            render_message(message)
        elif message.role == "assistant":
            bubble = bubble or st.chat_message("assistant")
            with bubble:
                _render_answer(message, results)


def render_message(message: Message) -> None:
    with st.chat_message(message.role):
        _render_answer(message, {})


def _render_answer(message: Message, results: dict[str | None, Message]) -> None:
    if message.content:
        st.markdown(message.content)
    if message.error:
        st.error(message.error, icon=":material/error:")
    for call in message.tool_calls:
        result = results.get(call.id)
        with st.status(_card_label(call, result), state=_card_state(result), expanded=False):
            _card_body(call, result)
    if message.metrics is not None and message.role == "assistant" and not message.error:
        _metrics_caption(message)


def _card_label(call: ToolCall, result: Message | None) -> str:
    if result is None:
        return f"{call.name} · no result"
    took = f" · {result.duration_s:.2f} s" if result.duration_s is not None else ""
    outcome = {"stopped": " · stopped", "failed": " · failed"}.get(result.error or "", "")
    return f"{call.name}{took}{outcome}"


def _card_state(result: Message | None) -> str:
    return "complete" if result is not None and result.error is None else "error"


def _card_body(call: ToolCall, result: Message | None) -> None:
    st.caption("Arguments")
    st.code(json.dumps(call.arguments, indent=2, ensure_ascii=False), language="json", wrap_lines=True)
    if result is not None:
        st.caption("Result")
        st.code(result.content, language="text", wrap_lines=True)


def _metrics_caption(message: Message) -> None:
    assert message.metrics is not None
    summary = message.metrics.summary()
    if message.stopped:
        st.caption(f":orange[Stopped] · {summary}")
    else:
        st.caption(summary)


def stream_turn(
    client: Client, conversation: Conversation, sidebar: SidebarState, tools: ToolSettings | None = None
) -> None:
    """Stream a turn into an assistant bubble: text as it comes, a live card per tool call.

    If the user presses Stop (or anything reruns the script), Streamlit raises inside a render call; closing the
    event stream then cancels generation (or abandons the running tool) and the agent keeps what happened so far,
    marked stopped. After Stop Streamlit refuses every further render call, so the "Stopped" mark appears on the
    next rerun.
    """
    with st.chat_message("assistant"):
        notices = st.container()
        body = st.empty()
        text = ""
        last_flush = 0.0
        card = None
        card_started = 0.0
        events = run_turn(client, conversation, sidebar.params, sidebar.system_prompt, tools=tools)
        with closing(events):
            for event in events:
                if isinstance(event, TextDelta):
                    text += event.text
                    now = time.monotonic()
                    if now - last_flush >= _FLUSH_EVERY_S:
                        body.markdown(text)
                        last_flush = now
                elif isinstance(event, Waiting):
                    if card is not None:
                        card.update(label=f"Running {card_name}... {time.monotonic() - card_started:.1f} s")
                    else:
                        body.markdown(text or ":grey[waiting for the model...]")
                elif isinstance(event, Notice):
                    notices.caption(event.text)
                elif isinstance(event, AnswerDone):
                    body.markdown(event.message.content or "")
                    if not event.message.error and (event.message.content or event.message.tool_calls):
                        _metrics_caption(event.message)
                    text = ""
                elif isinstance(event, ToolCallStarted):
                    card_name, card_started = event.call.name, time.monotonic()
                    card = st.status(f"Running {card_name}...", state="running", expanded=True)
                    with card:
                        st.caption("Arguments")
                        st.code(json.dumps(event.call.arguments, indent=2, ensure_ascii=False), language="json",
                                wrap_lines=True)
                elif isinstance(event, ToolCallFinished):
                    assert card is not None
                    with card:
                        st.caption("Result")
                        st.code(event.message.content, language="text", wrap_lines=True)
                    card.update(label=_card_label(event.call, event.message), state=_card_state(event.message),
                                expanded=False)
                    card = None
                    body = st.empty()  # the next answer goes below the card
                elif isinstance(event, TurnError):
                    st.error(event.message, icon=":material/error:")
                elif isinstance(event, TurnDone):
                    pass


def answer_if_asked(
    page: str,
    prompt: str | None,
    conversation: Conversation,
    client: Client | None,
    sidebar: SidebarState,
    tools: ToolSettings | None = None,
) -> None:
    """A page's chat loop: add the submitted message (or take a Regenerate/Resend request), stream the answer,
    then redraw once so the sidebar (drawn before this turn) reflects the new last message."""
    wants_answer = state.pop_turn_request(page)
    if prompt and prompt.strip():
        render_message(conversation.add(Message(role="user", content=prompt.strip())))
        wants_answer = True
    if not wants_answer:
        return
    if client is None:
        answer_error(conversation, "No model is loaded: fix the model settings in the sidebar, then press Regenerate.")
    else:
        stream_turn(client, conversation, sidebar, tools)
    st.rerun()


def answer_error(conversation: Conversation, reason: str) -> None:
    """Record and show that no answer could be produced, keeping the user's message for a later Regenerate."""
    message = conversation.add(Message(role="assistant", error=reason))
    render_message(message)
