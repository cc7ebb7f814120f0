"""The row of actions under a message: copy; a preview of an answer's HTML, SVG or Mermaid code
(app/frontends/streamlit/previews/); edit (a user message) or regenerate (an answer); `‹ 2/3 ›` where
earlier versions of the conversation from that message on are kept (app/domain/conversation.py,
Conversation.new_version); and on an answer, thumbs up or down with a comment
(app/frontends/streamlit/answer_feedback.py).

Every action works on any message, not only the last: editing or regenerating an earlier one branches the
conversation there, keeping what followed as a version to switch back to. The callbacks run before the next run
draws anything, so the page shows the changed conversation (and streams the new answer) at once.
"""

from __future__ import annotations

import streamlit as st

from app.domain.conversation import Conversation, Message
from app.frontends.streamlit import persistence, state
from app.frontends.streamlit.answer_feedback import feedback_controls
from app.frontends.streamlit.eval_case_form import save_as_test_case
from app.frontends.streamlit.previews.frame import preview_button
from app.frontends.streamlit.trace_timeline import trace_button


def user_actions(page: str, conversation: Conversation, index: int) -> None:
    """Copy, edit and the versions of user message `index`."""
    message = conversation.messages[index]
    with st.container(horizontal=True, gap="small", key=f"actions/{page}/{index}"):
        _copy(message.content)
        with st.popover("Edit", icon=":material/edit:", type="tertiary", help="Edit this message and send it "
                        "again: the conversation goes on from it, and the one before stays as a version."):
            key = f"edit/{page}/{index}/{persistence.fingerprint(message)[:12]}"  # refilled when the message changes
            st.text_area("Your message", value=message.content, key=key, height=120)
            st.button("Send", key=f"edit_send/{page}/{index}", type="primary", icon=":material/send:",
                      on_click=_send_edit, args=(page, conversation, index, key))
        _versions(page, conversation, index)


def answer_actions(page: str, conversation: Conversation, head: int, last: int) -> None:
    """Copy, regenerate and the versions of the answer that messages `head`..`last` make up (one assistant bubble:
    its answers, tool calls and results)."""
    texts = [m.content for m in conversation.messages[head : last + 1] if m.role == "assistant" and m.content]
    text = "\n\n".join(texts)
    with st.container(horizontal=True, gap="small", key=f"actions/{page}/{head}"):
        _copy(text)
        preview_button(texts, key=f"preview/{page}/{head}")
        st.button("Regenerate", key=f"regenerate/{page}/{head}", icon=":material/refresh:", type="tertiary",
                  on_click=regenerate, args=(page, conversation, head),
                  help="A new answer to the message above; this one stays as a version.")
        _versions(page, conversation, head)
        trace_button(conversation, head, last, key=f"trace/{page}/{head}")
        save_as_test_case(page, conversation, head, last)
        feedback_controls(page, conversation, head, last)


def regenerate(page: str, conversation: Conversation, head: int) -> None:
    """A new answer from message `head` on (the first message of an answer); what is there now becomes a version.
    Also what the sidebar's Regenerate does for the last answer."""
    if head == 0 or conversation.messages[head - 1].role != "user":
        st.toast("Only an answer to a message can be regenerated.", icon=":material/info:")
        return
    conversation.new_version(head)
    state.request_turn(page)
    state.page_changed()


def _copy(text: str) -> None:
    """The message's text (its Markdown source) in a code box, whose own button copies it to the clipboard."""
    with st.popover("Copy", icon=":material/content_copy:", type="tertiary", help="The message as text, to copy"):
        if text.strip():
            st.code(text, language="markdown", wrap_lines=True)
        else:
            st.caption("This message has no text.")


def _versions(page: str, conversation: Conversation, index: int) -> None:
    current, total = conversation.version_count(index)
    if total == 1:
        return
    st.button("", key=f"version_back/{page}/{index}", icon=":material/chevron_left:", type="tertiary",
              disabled=current == 1, on_click=_switch, args=(conversation, index, current - 1),
              help="The previous version")
    st.caption(f"{current}/{total}")
    st.button("", key=f"version_next/{page}/{index}", icon=":material/chevron_right:", type="tertiary",
              disabled=current == total, on_click=_switch, args=(conversation, index, current + 1),
              help="The next version")


def _switch(conversation: Conversation, index: int, number: int) -> None:
    conversation.switch_version(index, number)  # saved by the next run (app/main.py), like every change
    state.page_changed()


def _send_edit(page: str, conversation: Conversation, index: int, key: str) -> None:
    text = str(st.session_state.get(key, "")).strip()
    if not text:
        st.toast("The edited message is empty: type something to send.", icon=":material/warning:")
        return
    edited = conversation.messages[index]
    conversation.new_version(index)
    conversation.add(Message(role="user", content=text, attachments=list(edited.attachments)))
    state.request_turn(page)
    state.page_changed()

