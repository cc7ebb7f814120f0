"""Rendering a conversation (with tool-call cards) and streaming one turn into it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import closing
from typing import Any

import streamlit as st

from app.agent import (
    AnswerDone,
    Notice,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallWriting,
    ToolSettings,
    TurnDone,
    TurnError,
    Waiting,
    run_turn,
)
from app.chat_format import ImagePolicy
from app.clients.base import Client
from app.conversation import Attachment, Conversation, Message, ToolCall
from app.media import IMAGE_TYPES, ImageError, check_message_images, prepare_image
from app.tools.browser import cited_sources
from app.tools.documents import UPLOAD_TYPES, DocumentError, document_attachment
from app.ui import persistence, state
from app.ui.safe_markdown import safe_label, safe_markdown
from app.ui.sidebar import SidebarState, page_section

ATTACHMENT_TYPES = [*IMAGE_TYPES, *UPLOAD_TYPES]  # what a page's message box accepts: pictures and documents

_FLUSH_EVERY_S = 0.05  # re-render the growing answer at most 20 times a second
_THOUGHT_ICON = ":material/psychology:"


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


@persistence.shown_safely  # a stored conversation that cannot be drawn says why instead of stopping the page
def render_history(conversation: Conversation, transform: Callable[[str], str] | None = None) -> None:
    """User messages in their own bubbles; everything the assistant did for one question (answers, tool calls and
    their results) in one assistant bubble."""
    results = {m.tool_call_id: m for m in conversation.messages if m.role == "tool"}
    bubble = None
    turn_results: list[Message] = []
    for message in conversation.messages:
        if message.role in ("user", "system"):
            _sources(bubble, turn_results)
            bubble, turn_results = None, []
            render_message(message)
        elif message.role == "assistant":
            bubble = bubble or st.chat_message("assistant")
            with bubble:
                _render_answer(message, results, transform)
        elif message.role == "tool":
            turn_results.append(message)
    _sources(bubble, turn_results)


def _sources(bubble: Any, tool_results: list[Message]) -> None:
    """Under an answer: links to the web pages its tools read (numbered as the model was told to cite them)."""
    found = cited_sources("\n".join(m.content for m in tool_results))
    if bubble is not None and found:
        with bubble:
            links = " · ".join(f"[[{n}] {title}]({url})" for n, title, url in found)
            st.caption(safe_markdown("Sources: " + links))


def render_message(message: Message) -> None:
    with st.chat_message(message.role):
        if message.images:
            columns = st.columns(min(len(message.images), 4))
            for index, image in enumerate(message.images):
                columns[index % len(columns)].image(image.data, caption=safe_markdown(image.name), width="content")
        _render_answer(message, {})


def _render_answer(
    message: Message, results: dict[str | None, Message], transform: Callable[[str], str] | None = None
) -> None:
    if message.thinking:
        with st.expander(thought_label(message), icon=_THOUGHT_ICON):
            st.markdown(safe_markdown(message.thinking))
    if message.content:
        content = transform(message.content) if transform and message.role == "assistant" else message.content
        st.markdown(safe_markdown(content))
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
        _metrics_caption(message)
    for call in message.tool_calls:
        result = results.get(call.id)
        with st.status(_card_label(call, result), state=_card_state(result), expanded=False):
            _card_body(call, result)
        _images(result)


def _card_label(call: ToolCall, result: Message | None) -> str:
    if result is None:
        return safe_label(f"{call.name} · no result")
    took = f" · {result.duration_s:.2f} s" if result.duration_s is not None else ""
    outcome = {"stopped": " · stopped", "failed": " · failed"}.get(result.tool_status or "", "")
    return safe_label(f"{call.name}{took}{outcome}")


def _card_state(result: Message | None) -> str:
    return "complete" if result is not None and result.tool_status == "ok" else "error"


def _card_body(call: ToolCall, result: Message | None) -> None:
    _arguments(call)
    if result is not None:
        _result_body(result)


def _arguments(call: ToolCall) -> None:
    st.caption("Arguments")
    code = call.arguments.get("code")
    if list(call.arguments) == ["code"] and isinstance(code, str):
        st.code(code, language="python", wrap_lines=True)  # a code tool: show the program, not escaped JSON
    else:
        st.code(json.dumps(call.arguments, indent=2, ensure_ascii=False), language="json", wrap_lines=True)


def _result_body(result: Message) -> None:
    st.caption("Result")
    st.code(result.display_text or result.content, language="text", wrap_lines=True)


def _images(message: Message | None) -> None:
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


def _metrics_caption(message: Message) -> None:
    assert message.metrics is not None
    summary = safe_markdown(message.metrics.summary())  # an imported conversation's metrics are not ours
    if message.stopped:
        st.caption(f":orange[Stopped] · {summary}")
    else:
        st.caption(summary)


def _show_call_being_written(slot: Any, call: ToolCallWriting) -> None:
    """A code tool's program as code (its JSON string decoded as far as it goes), any other call as its JSON."""
    with slot.container():
        st.caption(safe_markdown(f"Writing a call to {call.name or 'a tool'}..."))
        code = _partial_json_string(call.arguments, '{"code": "')
        if code is not None:
            st.code(code, language="python", wrap_lines=True)
        else:
            st.code(call.arguments, language="json", wrap_lines=True)


def _partial_json_string(arguments: str, opening: str) -> str | None:
    """The value of an unfinished one-string JSON object such as {"code": "print(1)\\n..., or None."""
    if not arguments.startswith(opening):
        return None
    body = arguments[len(opening) :].removesuffix('"}')
    for cut in range(6):  # an escape sequence may be cut off at the end (\\, \\u12a)
        try:
            return json.loads('"' + body[: len(body) - cut] + '"')
        except json.JSONDecodeError:
            continue
    return None


def stream_turn(
    page: str,
    client: Client,
    conversation: Conversation,
    sidebar: SidebarState,
    tools: ToolSettings | None = None,
    transform: Callable[[str], str] | None = None,
    images: ImagePolicy | None = None,
) -> None:
    """Stream a turn into an assistant bubble: text as it comes, a live card per tool call; each finished answer
    and tool result is saved to the page's stored conversation at once.

    If the user presses Stop (or anything reruns the script), Streamlit raises inside a render call; closing the
    event stream then cancels generation (or abandons the running tool) and the agent keeps what happened so far,
    marked stopped. After Stop Streamlit refuses every further render call, so the "Stopped" mark appears on the
    next rerun.
    """
    with st.chat_message("assistant"):
        notices = st.container()
        thought_slot = st.empty()  # a reasoning model's thought, above the answer it leads to
        thought: _Thought | None = None
        body = st.empty()
        text = ""
        last_flush = 0.0
        card = None
        card_name, card_started = "", 0.0
        writing = st.empty()  # the call the model is writing, live, until its card takes over
        writing_call = False
        events = run_turn(client, conversation, sidebar.params, sidebar.system_prompt, tools=tools, images=images)
        with closing(events):
            for event in events:
                if isinstance(event, ThinkingDelta):
                    thought = thought or _Thought(thought_slot)
                    thought.add(event.text)
                elif isinstance(event, TextDelta):
                    if thought is not None:
                        thought.answer_started()
                    text += event.text
                    now = time.monotonic()
                    if now - last_flush >= _FLUSH_EVERY_S:
                        body.markdown(safe_markdown(text, streaming=True))
                        last_flush = now
                elif isinstance(event, Waiting):
                    if card is not None:
                        card.update(label=safe_label(f"Running {card_name}... {time.monotonic() - card_started:.1f} s"))
                    elif not writing_call:
                        body.markdown(safe_markdown(text, streaming=True) or ":grey[waiting for the model...]")
                elif isinstance(event, ToolCallWriting):
                    if not writing_call and not text:
                        body.empty()  # no "waiting" above a call that is being written
                    writing_call = True
                    now = time.monotonic()
                    if now - last_flush >= _FLUSH_EVERY_S:
                        _show_call_being_written(writing, event)
                        last_flush = now
                elif isinstance(event, Notice):
                    notices.caption(safe_markdown(event.text))
                elif isinstance(event, AnswerDone):
                    persistence.save(page, conversation)  # each answer is stored as soon as it is complete
                    if thought is not None:
                        thought.done(event.message)
                        thought = None
                    writing.empty()
                    writing_call = False
                    content = event.message.content or ""
                    body.markdown(safe_markdown(transform(content) if transform else content))
                    if not event.message.error and (event.message.content or event.message.tool_calls):
                        _metrics_caption(event.message)
                    text = ""
                elif isinstance(event, ToolCallStarted):
                    card_name, card_started = event.call.name, time.monotonic()
                    card = st.status(safe_label(f"Running {card_name}..."), state="running", expanded=True)
                    with card:
                        _arguments(event.call)
                elif isinstance(event, ToolCallFinished):
                    persistence.save(page, conversation)
                    assert card is not None
                    with card:
                        _result_body(event.message)
                    card.update(label=_card_label(event.call, event.message), state=_card_state(event.message),
                                expanded=False)
                    _images(event.message)
                    card = None
                    thought_slot = st.empty()  # the next answer (and its thought) goes below the card
                    body = st.empty()
                    writing = st.empty()
                elif isinstance(event, TurnError):
                    st.error(safe_markdown(event.message), icon=":material/error:")
                elif isinstance(event, TurnDone):
                    pass


class _Thought:
    """A thought as it streams: a collapsed section whose title counts the seconds, updated at most 20 times a
    second; once the answer is done, the same section as the history shows it."""

    def __init__(self, slot: Any) -> None:
        self.started = time.monotonic()
        self.slot = slot
        self.status = slot.status("Thinking...", state="running", expanded=False)
        with self.status:
            self.body = st.empty()
        self.text = ""
        self.last_flush = 0.0
        self.thinking = True

    def add(self, text: str) -> None:
        self.text += text
        if time.monotonic() - self.last_flush >= _FLUSH_EVERY_S:
            self.body.markdown(safe_markdown(self.text, streaming=True))
            self.status.update(label=f"Thinking... {time.monotonic() - self.started:.0f} s")
            self.last_flush = time.monotonic()

    def answer_started(self) -> None:
        if self.thinking:
            self.thinking = False
            self.body.markdown(safe_markdown(self.text, streaming=True))
            self.status.update(label=f"Thought for {time.monotonic() - self.started:.1f} s", state="complete")

    def done(self, message: Message) -> None:
        with self.slot.expander(thought_label(message), icon=_THOUGHT_ICON):
            st.markdown(safe_markdown(message.thinking or self.text))


def answer_if_asked(
    page: str,
    submitted: Any,
    conversation: Conversation,
    client: Client | None,
    sidebar: SidebarState,
    tools: ToolSettings | None = None,
    on_upload: Callable[[str, bytes], None] | None = None,
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


def user_message(submitted: Any, on_upload: Callable[[str, bytes], None] | None = None) -> Message | None:
    """The user's message from st.chat_input's value. Pictures are checked and made safe (app/media.py): one that
    cannot be used raises ImageError and nothing is sent. Other files become document attachments (a file that
    cannot be read stays on the message as a visible note, and the rest of the message still goes out)."""
    if submitted is None:
        return None
    text = submitted if isinstance(submitted, str) else getattr(submitted, "text", "") or ""
    files = [] if isinstance(submitted, str) else list(getattr(submitted, "files", []) or [])
    images = [(upload.name, upload.getvalue()) for upload in files if _is_image_name(upload.name)]
    pictures = [Attachment(kind="image", name=name, data=prepare_image(data, name).data) for name, data in images]
    check_message_images([picture.data for picture in pictures])
    attachments: list[Attachment] = list(pictures)
    for upload in (upload for upload in files if not _is_image_name(upload.name)):
        data = upload.getvalue()
        try:
            attachment = document_attachment(upload.name, data)
            if on_upload is not None:
                on_upload(upload.name, data)
        except DocumentError as exc:
            attachment = Attachment(kind="document", name=upload.name, note=f"not read: {exc}")
        attachments.append(attachment)
    if not text.strip() and not attachments:
        return None
    return Message(role="user", content=text.strip(), attachments=attachments)


def _is_image_name(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower() in IMAGE_TYPES


def _refuse_message(submitted: Any, error: ImageError) -> None:
    """A picture that cannot be used: nothing is sent and the conversation is unchanged; the typed text is shown
    back, ready to copy, since the message box has already been emptied."""
    st.error(safe_markdown(f"**Not sent.** {error} Attach a PNG, JPEG, WebP or GIF picture and send the message "
                           "again."), icon=":material/hide_image:")
    text = submitted if isinstance(submitted, str) else getattr(submitted, "text", "") or ""
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
