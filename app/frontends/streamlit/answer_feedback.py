"""Thumbs up or down under an answer, and an optional comment: kept with the answer (Message.feedback), saved with
the conversation at once, exported with it, and counted per model on the Compare page (app/storage/feedback.py).

The callbacks only change the answer; the row's fragment then saves it (after any interrupted turn is recorded, as
a full run does), so that a failure shows where it happened and a success is said only when it is true."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from app.agent.loop import pending_calls
from app.domain.conversation import MAX_FEEDBACK_COMMENT_CHARS, Conversation, Feedback, Message, Rating
from app.frontends.streamlit import persistence, state

_RATINGS: tuple[Rating, Rating] = ("down", "up")  # st.feedback("thumbs"): 0 is thumbs down, 1 thumbs up


def rated_answer(conversation: Conversation, head: int, last: int) -> Message | None:
    """The answer that messages `head`..`last` (one bubble) end with: its last assistant message."""
    for message in reversed(conversation.messages[head : last + 1]):
        if message.role == "assistant":
            return message
    return None


def feedback_controls(page: str, conversation: Conversation, head: int, last: int) -> None:
    """The thumbs, and once the answer is rated, a Comment popover. None while the bubble's calls wait for
    approval: its answer is not written yet."""
    _save_if_rated(page, conversation)
    answer = rated_answer(conversation, head, last)
    if answer is None or (not answer.content and not answer.tool_calls):
        return
    if last == len(conversation.messages) - 1 and pending_calls(conversation):
        return
    # Keyed on the answer without its feedback: rating it keeps the same widgets (and a comment being typed).
    place = f"{page}/{head}/{persistence.fingerprint(replace(answer, feedback=None))[:12]}"
    current = answer.feedback
    st.feedback("thumbs", key=f"feedback/{place}", default=None if current is None else _RATINGS.index(current.rating),
                on_change=_rate, args=(page, answer, f"feedback/{place}"))
    if current is None:
        return
    label = "Comment" if not current.comment else "Your comment"
    with st.popover(label, icon=":material/rate_review:", type="tertiary",
                    help="Say what was good or wrong in this answer: kept with your rating (taking the rating back "
                         "removes it)"):
        key = f"feedback_comment/{place}"
        st.text_area("What was good or wrong?", value=current.comment, key=key, height=100,
                     max_chars=MAX_FEEDBACK_COMMENT_CHARS)
        st.button("Save the comment", key=f"feedback_save/{place}", type="primary", icon=":material/save:",
                  on_click=_comment, args=(page, answer, key))


def _changed(page: str) -> str:
    return f"feedback_changed/{page}"


def _save_if_rated(page: str, conversation: Conversation) -> None:
    said = st.session_state.pop(_changed(page), None)
    if said is None:
        return
    state.wait_for_interrupted_turn()
    if persistence.save(page, conversation) and said:
        st.toast(said, icon=":material/rate_review:")


def _rate(page: str, answer: Message, key: str) -> None:
    chosen = st.session_state.get(key)
    comment = answer.feedback.comment if answer.feedback else ""
    answer.feedback = None if chosen is None else Feedback(_RATINGS[chosen], comment)
    st.session_state[_changed(page)] = ""


def _comment(page: str, answer: Message, key: str) -> None:
    if answer.feedback is None:  # unrated meanwhile (another run): nothing to comment on
        return
    text = str(st.session_state.get(key, "")).strip()[:MAX_FEEDBACK_COMMENT_CHARS]
    answer.feedback = Feedback(answer.feedback.rating, text)
    st.session_state[_changed(page)] = "Saved your comment." if text else "Removed your comment."
