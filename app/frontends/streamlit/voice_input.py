"""Voice input on the chat pages: the chat input's microphone records, the recording is transcribed on this machine
(app/speech/) in place, with its progress, into a draft where the words can be corrected before they are sent.
Without a speech model, the message box says so before anything is recorded, and a recording made anyway goes
nowhere.

A page calls `placeholder` for its message box's text, `take` on the box's value (a recording is kept for this
run, and a draft's Send comes back as the page's submitted message), then `render_draft` where its new messages go.
A recording stays kept until its words are in the draft: a run cut short (another click) transcribes it again. A
new recording adds its words to the draft; the draft stays until it is sent or discarded, like typed text."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.frontends.streamlit.safe_markdown import safe_markdown
from app.speech.audio import AudioError, read_wav
from app.speech.transcriber import SpeechModelMissing, TranscriptionError, speech_model_known, transcriber

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upload:
    """A file that came with the recording, kept for the draft (what chat_page.user_message reads)."""

    name: str
    data: bytes

    def getvalue(self) -> bytes:
        return self.data


@dataclass
class Submission:
    """A draft sent: the page answers it as it would the chat input's value."""

    text: str
    files: list[Upload] = field(default_factory=list)


@dataclass
class _Recorded:
    audio: bytes
    typed: str
    files: list[Upload]


@dataclass
class _Draft:
    text: str
    files: list[Upload]
    note: str  # how it was made: "Transcribed 3.2 s with openai/whisper-base on this machine."
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # a new text box per draft


def _key(kind: str, page: str) -> str:
    return f"voice_{kind}/{page}"


def placeholder(text: str) -> str:
    """The message box's text, saying before anything is recorded that the microphone has no model to use (as
    last found: the page never waits for the search)."""
    if speech_model_known() is False:
        return f"{text} · the microphone needs a speech model: see the Models page"
    return text


def take(page: str, submitted: Any) -> Any:
    """The page's submitted message: a sent draft, else the chat input's value; None when it was a recording (kept
    for render_draft to transcribe)."""
    sent = st.session_state.pop(_key("send", page), None)
    if sent is not None:
        return sent
    audio = None if submitted is None or isinstance(submitted, str) else getattr(submitted, "audio", None)
    if audio is None:
        return submitted
    files = [Upload(upload.name, upload.getvalue()) for upload in getattr(submitted, "files", None) or []]
    recorded = _Recorded(audio.getvalue(), getattr(submitted, "text", "") or "", files)
    st.session_state.setdefault(_key("recorded", page), []).append(recorded)
    return None


def render_draft(page: str, disabled: bool = False) -> None:
    """The recordings just made, transcribed here; then the draft to correct and send, if there is one. `disabled`:
    the page takes no message now (calls wait for approval), so the draft waits too."""
    pending: list[_Recorded] = st.session_state.get(_key("recorded", page), [])
    while pending:
        recorded = pending[0]
        try:
            _transcribe(page, recorded)
        except Exception:  # not a rerun or a stop (BaseException): said once, not tried at every run
            log.exception("Transcribing a recording failed")
            st.error("The recording could not be transcribed (the app's log says why). Nothing was sent.",
                     icon=":material/mic_off:")
        _done(page, recorded)  # only now: a run cut short while transcribing leaves it for the next
    draft: _Draft | None = st.session_state.get(_key("draft", page))
    if draft is None:
        return
    with st.container(border=True, key=f"voice_draft/{page}"):
        st.caption(f":material/mic: {draft.note} Correct it if needed, then send.")
        text_key = f"voice_text/{page}/{draft.id}"
        st.text_area("Your words", value=draft.text, key=text_key, height=110, on_change=_edited,
                     args=(page, text_key))
        if draft.files:
            st.caption(safe_markdown("With " + ", ".join(upload.name for upload in draft.files)))
        with st.container(horizontal=True, gap="small"):
            st.button("Send", key=f"voice_send_button/{page}", type="primary", icon=":material/send:",
                      on_click=_send, args=(page, text_key), disabled=disabled,
                      help="Answer the tool calls above first" if disabled else None)
            st.button("Discard", key=f"voice_discard/{page}", type="tertiary", icon=":material/delete:",
                      on_click=_discard, args=(page,))


def _transcribe(page: str, recorded: _Recorded) -> None:
    def keep(note: str, text: str = "") -> None:
        """The words into the draft, after those already there (a second recording adds to the first)."""
        draft: _Draft | None = st.session_state.get(_key("draft", page))
        words = [part for part in (recorded.typed.strip(), text.strip()) if part]
        if draft is None and not words and not recorded.files:
            return
        if draft is not None:
            words.insert(0, draft.text.strip())
        files = [*(draft.files if draft else []), *recorded.files]
        st.session_state[_key("draft", page)] = _Draft(" ".join(w for w in words if w), files, note)
        _done(page, recorded)  # in the draft: a rerun from here on must not add its words again

    try:
        recording = read_wav(recorded.audio)
        if recording.silent:
            st.warning("The recording is silent: check that the browser uses the right microphone and that it is "
                       "not muted, then record again.", icon=":material/mic_off:")
            keep("Nothing was heard in the last recording.")
            return
        with st.spinner("Loading the speech model..."):
            model = transcriber()
        with st.status(f"Transcribing {recording.seconds:.1f} s of speech with {model.name}...",
                       expanded=True) as status:
            bar = st.progress(0.0, text="Listening...")

            def advance(done: int, total: int) -> None:
                bar.progress(min(done / total, 1.0), text=f"{min(100 * done // total, 100)}% done")

            text = model.transcribe(recording, advance)
            keep(f"Transcribed {recording.seconds:.1f} s with {model.name} on this machine.", text)  # before any
            status.update(label=f"Transcribed {recording.seconds:.1f} s of speech", state="complete",  # rerun
                          expanded=False)
    except SpeechModelMissing as exc:
        st.warning(safe_markdown(str(exc)), icon=":material/mic_off:")
        keep("No speech model: what you typed is kept.")
        return
    except (AudioError, TranscriptionError) as exc:
        st.error(safe_markdown(f"{exc} Nothing was sent."), icon=":material/mic_off:")
        keep("The last recording could not be transcribed.")
        return
    if not text:
        st.warning(f"No words were recognised in the {recording.seconds:.1f} s recorded: speak closer to the "
                   "microphone, or type instead.", icon=":material/hearing_disabled:")


def _done(page: str, recorded: _Recorded) -> None:
    pending: list[_Recorded] = st.session_state.get(_key("recorded", page), [])
    if any(item is recorded for item in pending):
        pending.remove(recorded)


def _edited(page: str, text_key: str) -> None:
    """Corrections kept with the draft: its box is not drawn on another page, and its state would go."""
    draft: _Draft | None = st.session_state.get(_key("draft", page))
    if draft is not None:
        draft.text = str(st.session_state.get(text_key, ""))


def _send(page: str, text_key: str) -> None:
    draft: _Draft | None = st.session_state.get(_key("draft", page))
    text = str(st.session_state.get(text_key, "")).strip()
    if draft is None:
        return
    if not text and not draft.files:
        st.toast("The draft is empty: type or record something to send.", icon=":material/warning:")
        return
    st.session_state[_key("send", page)] = Submission(text, list(draft.files))
    del st.session_state[_key("draft", page)]


def _discard(page: str) -> None:
    st.session_state.pop(_key("draft", page), None)
