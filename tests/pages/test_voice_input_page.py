"""Voice input through the app (AppTest): a recording, as the chat input hands it over, is transcribed on this
machine by a Whisper-shaped model into a draft under the conversation; the person corrects the words and sends
them, and the model answers. Without a speech model the draft keeps what was typed and the page says which model to
fetch and how."""

from __future__ import annotations

from app.frontends.streamlit import voice_input
from tests.helpers import TOOLS_PAGE, open_app
from tests.unit.test_speech import wav_bytes


def _record(at, text: str = "", seconds: float = 3.0, page: str = "chat") -> None:
    """What `take` does with the chat input's value when it holds a recording."""
    kept = at.session_state[f"voice_recorded/{page}"] if f"voice_recorded/{page}" in at.session_state else []
    at.session_state[f"voice_recorded/{page}"] = [*kept, voice_input._Recorded(wav_bytes(seconds), text, [])]


def _captions(at) -> str:
    return " ".join(caption.value for caption in at.caption)


def test_a_recording_becomes_a_draft_to_correct_and_send(monkeypatch, tiny_model_dir, tiny_whisper_dir, database):
    monkeypatch.setenv("DEMO_SPEECH_MODEL", str(tiny_whisper_dir))
    with open_app(monkeypatch, tiny_model_dir, max_new_tokens=6) as at:
        _record(at, "Please:")
        at.run()
        assert not at.exception
        assert "Transcribed 3.0 s with tiny-whisper on this machine." in _captions(at)
        (draft,) = [area for area in at.text_area if area.key.startswith("voice_text/chat/")]
        assert draft.value.startswith("Please: ") and len(draft.value) > len("Please: ")  # typed, then heard
        assert not at.chat_message  # nothing is sent before the person says so
        draft.input("What is the capital of France?").run()
        at.button(key="voice_send_button/chat").click().run()
        assert not at.exception
        assert at.chat_message[0].markdown[0].value == "What is the capital of France?"
        assert at.chat_message[1].name == "assistant"
        assert not [area for area in at.text_area if area.key.startswith("voice_text/")]
        (entry,) = database.list("local", page="chat")
        assert database.get("local", entry.id).messages[0].content == "What is the capital of France?"


def test_without_a_speech_model_the_page_says_what_to_fetch_and_keeps_the_typed_words(monkeypatch, tiny_model_dir,
                                                                                     tmp_path):
    monkeypatch.delenv("DEMO_SPEECH_MODEL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("DEMO_MODEL_DIRS", str(tmp_path / "none"))
    with open_app(monkeypatch, tiny_model_dir) as at:
        _record(at, "Remember the milk")
        at.run()
        (warning,) = [w.value for w in at.warning if "speech-recognition model" in w.value]
        assert "openai/whisper-base" in warning and "not sent anywhere" in warning
        (draft,) = [area for area in at.text_area if area.key.startswith("voice_text/chat/")]
        assert draft.value == "Remember the milk"
        at.button(key="voice_discard/chat").click().run()
        assert not [area for area in at.text_area if area.key.startswith("voice_text/")]
        assert not at.chat_message


def test_take_keeps_a_recording_for_the_draft_and_passes_anything_else_on():
    from streamlit.testing.v1 import AppTest

    def script() -> None:
        from types import SimpleNamespace

        import streamlit as st

        from app.frontends.streamlit import voice_input as voice

        st.session_state["plain"] = voice.take("chat", "typed")
        st.session_state["none"] = voice.take("chat", None)
        recording = SimpleNamespace(getvalue=lambda: b"RIFF....WAVE")
        upload = SimpleNamespace(name="notes.txt", getvalue=lambda: b"milk")
        st.session_state["recorded"] = voice.take("chat", SimpleNamespace(text="and", files=[upload],
                                                                          audio=recording))

    at = AppTest.from_function(script)
    at.run()
    assert at.session_state["plain"] == "typed" and at.session_state["none"] is None
    assert at.session_state["recorded"] is None  # not sent: kept for the draft
    (kept,) = at.session_state["voice_recorded/chat"]
    assert (kept.audio, kept.typed, kept.files) == (b"RIFF....WAVE", "and", [voice_input.Upload("notes.txt", b"milk")])


def test_on_the_tools_page_a_second_recording_adds_to_the_draft(monkeypatch, tiny_model_dir, tiny_whisper_dir):
    monkeypatch.setenv("DEMO_SPEECH_MODEL", str(tiny_whisper_dir))
    with open_app(monkeypatch, tiny_model_dir, page=TOOLS_PAGE) as at:
        _record(at, "Convert", page="tools")
        at.run()
        assert not at.exception
        assert "Transcribed 3.0 s with tiny-whisper on this machine." in _captions(at)
        (draft,) = [area for area in at.text_area if area.key.startswith("voice_text/tools/")]
        draft.input("Convert 5 km to miles").run()  # corrected, then more said
        _record(at, "", seconds=2.0, page="tools")
        at.run()
        (draft,) = [area for area in at.text_area if area.key.startswith("voice_text/tools/")]
        assert draft.value.startswith("Convert 5 km to miles ") and len(draft.value) > len("Convert 5 km to miles ")
        assert not at.button(key="voice_send_button/tools").disabled
