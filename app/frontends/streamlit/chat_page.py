"""What the Chat, Tools and All Tools pages share: the model line under the title, and the chat loop that takes
the message box's value, streams the answer and offers a text-only retry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import streamlit as st

from app.agent import attachments
from app.agent.loop import ToolSettings
from app.clients.choice import fallback_note
from app.clients.client_protocol import Client
from app.domain.conversation import Conversation, Message
from app.domain.media import ImageError
from app.frontends.streamlit import approvals, knowledge_chat, knowledge_page, model_status, persistence, state
from app.frontends.streamlit.live_turn import stream_turn
from app.frontends.streamlit.messages import render_message
from app.frontends.streamlit.safe_markdown import safe_markdown
from app.frontends.streamlit.sidebar import SidebarState, status_section
from app.prompting.chat_format import ImagePolicy


def show_model(client: Client | None, detail: str = "") -> None:
    """Under the page title, the loaded model; next to the model picker, its live status
    (app/frontends/streamlit/model_status.py)."""
    with status_section():
        model_status.render(client)
    if client is not None:
        st.caption(safe_markdown(client.describe() + detail))
        if client.backend == "hf" and (note := fallback_note()):
            st.caption(safe_markdown(note))


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
    files) or take a Regenerate/Resend request or the user's decisions on waiting tool calls, stream the answer,
    then redraw once so the sidebar (drawn before this turn) reflects the new last message. `on_upload` also
    receives every uploaded document; `tool_images`: show the model the pictures its tools made (plots)."""
    request = state.pop_turn_request(page)
    wants_answer = request is not None
    try:
        message = user_message(submitted, on_upload)
    except ImageError as exc:
        _refuse_message(submitted, exc)
        return
    if message is not None:
        conversation.add(message)
        # The collections chosen in the sidebar, from here on; then, before the message is drawn, the passages for
        # it, so that its sources show while it is answered.
        problems = [knowledge_page.attach_chosen(conversation) if page == "chat" else None,
                    knowledge_chat.passages_for_turn(conversation)]
        for problem in filter(None, problems):
            st.warning(safe_markdown(problem), icon=":material/database:")
        render_message(message)
        persistence.save(page, conversation)  # stored before the answer starts: a crash loses only the answer
        wants_answer = True
    elif request is not None and request.decisions is None:  # Regenerate or Resend: searched again
        if unsearched := knowledge_chat.passages_for_turn(conversation):
            st.warning(safe_markdown(unsearched), icon=":material/database:")
    if not wants_answer:
        offer_text_only_answer(page, conversation, client)
        return
    if client is None:
        answer_error(conversation, "No model is loaded: fix the model settings in the sidebar, then press Regenerate.")
    else:
        images = ImagePolicy(see=not (request and request.text_only), tool_images=tool_images)
        if request is not None and request.tool and tools is not None and request.tool in tools.registry.names:
            tools = replace(tools, choice=request.tool)  # an example prompt made for this tool
        if request is not None and request.decisions is not None and persistence.changed_elsewhere(page):
            # Another tab may have answered these calls already: running them here could run them twice.
            approvals.remember_problem(page, "This conversation changed in another tab: nothing ran. Open it again "
                                             "from the history to see where it stands.")
            for running in (request.running or {}).values():
                running.cancel()  # a call that asked a question here: its answer is no longer this tab's to give
        elif request is not None and request.decisions is not None:  # the calls that waited: decided, answered
            stream_turn(page, client, conversation, sidebar, tools, transform, images, request.decisions,
                        request.running)
        else:
            stream_turn(page, client, conversation, sidebar, tools, transform, images)
    persistence.save(page, conversation)
    st.rerun()


def user_message(submitted: Any, on_upload: attachments.OnUpload | None = None) -> Message | None:
    """The user's message from st.chat_input's value: a string, or (when it accepts files) an object with `text`
    and `files` (uploads with `name` and `getvalue()`), and maybe `attachments` made already (MCP resources,
    app/frontends/streamlit/mcp_library.py); None when nothing was sent. app/agent/attachments.py makes the message: a
    picture that cannot be used raises ImageError."""
    if submitted is None:
        return None
    files = [] if isinstance(submitted, str) else list(getattr(submitted, "files", []) or [])
    uploads = [(upload.name, upload.getvalue()) for upload in files]
    ready = [] if isinstance(submitted, str) else list(getattr(submitted, "attachments", []) or [])
    return attachments.user_message(_submitted_text(submitted), uploads, on_upload, ready, knowledge_chat.reader())


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
    last_user = conversation.last_user_index()
    if last_user is not None:
        conversation.new_version(last_user + 1)  # the refusal stays as a version
        state.request_turn(page, text_only=True)


def answer_error(conversation: Conversation, reason: str) -> None:
    """Record and show that no answer could be produced, keeping the user's message for a later Regenerate."""
    message = conversation.add(Message(role="assistant", error=reason))
    render_message(message)
