"""What the Chat, Tools and All Tools pages share: the model line under the title, and the chat loop that takes
the message box's value, streams the answer and offers a text-only retry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from app import attachments
from app.agent import ToolSettings
from app.chat_format import ImagePolicy
from app.clients.base import Client
from app.conversation import Conversation, Message
from app.media import ImageError
from app.ui import persistence, state
from app.ui.live_turn import stream_turn
from app.ui.messages import render_message
from app.ui.safe_markdown import safe_markdown
from app.ui.sidebar import SidebarState, page_section

_VISION_LABELS = {
    True: ":material/visibility: Sees images: attach pictures to ask about them.",
    False: ":material/visibility_off: Text only: this model cannot see images (load a vision-language model, "
           "e.g. SmolVLM, to ask about pictures).",
    None: ":material/help: Images: the API server decides whether this model can see them.",
}


_ACTIVITY_HELP = ("Every browser tab and API request shares the one loaded model. The transformers backend writes up "
                  "to DEMO_HF_MAX_BATCH answers together (continuous batching), vLLM batches them itself; this is "
                  "how many it was writing when the page was drawn.")


def show_model(client: Client | None, detail: str = "") -> None:
    """Under the page title, the loaded model; in the sidebar, whether it can see images and how many answers (of
    every session) it is writing now."""
    if client is None:
        return
    st.caption(safe_markdown(client.describe() + detail))
    with page_section():
        st.caption(_VISION_LABELS[client.capabilities.vision])
        activity = client.activity()
        if activity is not None:
            st.caption(":material/groups: " + activity.describe(), help=_ACTIVITY_HELP)


def answer_if_asked(
    page: str,
    submitted: Any,
    conversation: Conversation,
    client: Client | None,
    sidebar: SidebarState,
    tools: ToolSettings | None = None,
    on_upload: attachments.OnUpload | None = None,
    transform: Callable[[str], str] | None = None,
    tool_images: bool = False,
) -> None:
    """A page's chat loop: add the submitted message (text, or text and files from a chat_input that accepts
    files) or take a Regenerate/Resend request, stream the answer, then redraw once so the sidebar (drawn before
    this turn) reflects the new last message. `on_upload` also receives every uploaded document; `tool_images`:
    show the model the pictures its tools made (plots)."""
    request = state.pop_turn_request(page)
    wants_answer = request is not None
    try:
        message = user_message(submitted, on_upload)
    except ImageError as exc:
        _refuse_message(submitted, exc)
        return
    if message is not None:
        render_message(conversation.add(message))
        persistence.save(page, conversation)  # stored before the answer starts: a crash loses only the answer
        wants_answer = True
    if not wants_answer:
        offer_text_only_answer(page, conversation, client)
        return
    if client is None:
        answer_error(conversation, "No model is loaded: fix the model settings in the sidebar, then press Regenerate.")
    else:
        images = ImagePolicy(see=not (request and request.text_only), tool_images=tool_images)
        stream_turn(page, client, conversation, sidebar, tools, transform, images)
    persistence.save(page, conversation)
    st.rerun()


def user_message(submitted: Any, on_upload: attachments.OnUpload | None = None) -> Message | None:
    """The user's message from st.chat_input's value: a string, or (when it accepts files) an object with `text`
    and `files` (uploads with `name` and `getvalue()`); None when nothing was sent. app/attachments.py makes the
    message: a picture that cannot be used raises ImageError."""
    if submitted is None:
        return None
    files = [] if isinstance(submitted, str) else list(getattr(submitted, "files", []) or [])
    uploads = [(upload.name, upload.getvalue()) for upload in files]
    return attachments.user_message(_submitted_text(submitted), uploads, on_upload)


def _submitted_text(submitted: Any) -> str:
    return submitted if isinstance(submitted, str) else getattr(submitted, "text", "") or ""


def _refuse_message(submitted: Any, error: ImageError) -> None:
    """A picture that cannot be used: nothing is sent and the conversation is unchanged; the typed text is shown
    back, ready to copy, since the message box has already been emptied."""
    st.error(safe_markdown(f"**Not sent.** {error} Attach a PNG, JPEG, WebP or GIF picture and send the message "
                           "again."), icon=":material/hide_image:")
    text = _submitted_text(submitted)
    if text.strip():
        st.caption("Your message, to copy:")
        st.code(text.strip(), language=None, wrap_lines=True)


def offer_text_only_answer(page: str, conversation: Conversation, client: Client | None) -> None:
    """After a turn that failed on a message with pictures (a model that cannot see them refuses clearly), offer to
    answer its text alone; the pictures stay in the conversation, and the prompt says they were there."""
    last_user = conversation.last_user_index()
    if last_user is None or not conversation.messages[last_user].images:
        return
    after = conversation.messages[last_user + 1:]
    if not after or not all(m.role == "assistant" and m.error for m in after):
        return
    if client is not None and client.capabilities.vision:
        return  # it can see: the failure was something else, which Regenerate retries
    st.button("Answer the text only", icon=":material/hide_image:", key=f"text_only/{page}",
              on_click=_answer_text_only, args=(page, conversation),
              help="Send the message without its pictures; the model is told that pictures were attached.")


def _answer_text_only(page: str, conversation: Conversation) -> None:
    conversation.rewind_to_last_user()
    state.request_turn(page, text_only=True)


def answer_error(conversation: Conversation, reason: str) -> None:
    """Record and show that no answer could be produced, keeping the user's message for a later Regenerate."""
    message = conversation.add(Message(role="assistant", error=reason))
    render_message(message)
