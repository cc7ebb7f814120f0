"""Voice input on the chat pages: the chat input's microphone records, the recording is transcribed on this machine
(app/speech/) in place, with its progress, into a box where the words can be corrected before they are sent. Without
a speech model, the box says which one to fetch and how; the recording goes nowhere.

A page calls `take` on its chat input's value (a recording is kept for this run, and a draft's Send comes back as
the page's submitted message), then `render_draft` where its new messages go."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.frontends.streamlit.safe_markdown import safe_markdown
from app.speech.audio import AudioError, read_wav
from app.speech.transcriber import SpeechModelMissing, TranscriptionError, transcriber


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
    note: str  # how it was made: "Transcribed 3.2 s with whisper-base on this machine"
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])  # a new text box per draft


def _key(kind: str, page: str) -> str:
    return f"voice_{kind}/{page}"


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
    st.session_state[_key("recorded", page)] = _Recorded(audio.getvalue(), getattr(submitted, "text", "") or "", files)
    return None


def render_draft(page: str) -> None:
    """A recording just made, transcribed here; then the draft to correct and send, if there is one."""
    recorded: _Recorded | None = st.session_state.pop(_key("recorded", page), None)
    if recorded is not None:
        _transcribe(page, recorded)
    draft: _Draft | None = st.session_state.get(_key("draft", page))
    if draft is None:
        return
    with st.container(border=True, key=f"voice_draft/{page}"):
        st.caption(f":material/mic: {draft.note} Correct it if needed, then send.")
        text_key = f"voice_text/{page}/{draft.id}"
        st.text_area("Your words", value=draft.text, key=text_key, height=110)
        if draft.files:
            st.caption(safe_markdown("With " + ", ".join(upload.name for upload in draft.files)))
        with st.container(horizontal=True, gap="small"):
            st.button("Send", key=f"voice_send_button/{page}", type="primary", icon=":material/send:",
                      on_click=_send, args=(page, text_key))
            st.button("Discard", key=f"voice_discard/{page}", type="tertiary", icon=":material/delete:",
                      on_click=_discard, args=(page,))


def _transcribe(page: str, recorded: _Recorded) -> None:
    def keep(note: str, text: str = "") -> None:
        words = " ".join(part for part in (recorded.typed.strip(), text.strip()) if part)
        if words or recorded.files:
            st.session_state[_key("draft", page)] = _Draft(words, recorded.files, note)

    try:
        recording = read_wav(recorded.audio)
        if recording.silent:
            st.warning("The recording is silent: check that the browser uses the right microphone and that it is "
                       "not muted, then record again.", icon=":material/mic_off:")
            keep("Nothing was heard in the recording.")
            return
        with st.spinner("Loading the speech model..."):
            model = transcriber()
        with st.status(f"Transcribing {recording.seconds:.1f} s of speech with {model.name}...",
                       expanded=True) as status:
            bar = st.progress(0.0, text="Listening...")

            def advance(done: int, total: int) -> None:
                bar.progress(done / total, text=f"{done} of {total} part{'s' if total > 1 else ''} done")

            text = model.transcribe(recording, advance)
            status.update(label=f"Transcribed {recording.seconds:.1f} s of speech", state="complete",
                          expanded=False)
    except SpeechModelMissing as exc:
        st.warning(safe_markdown(str(exc)), icon=":material/mic_off:")
        keep("No speech model: your typed text, kept.")
        return
    except (AudioError, TranscriptionError) as exc:
        st.error(safe_markdown(f"{exc} Nothing was sent."), icon=":material/mic_off:")
        keep("The recording could not be transcribed.")
        return
    keep(f"Transcribed {recording.seconds:.1f} s with {model.name} on this machine.", text)


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
