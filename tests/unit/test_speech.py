"""Voice input's core (app/speech/): recordings read from WAV as a browser sends them (and refused with a reason
when they cannot be), the speech model found through the model library or named by DEMO_SPEECH_MODEL, and a
recording transcribed by a Whisper-shaped model (random weights: nonsense words, through every real code path),
30 seconds at a time with its progress."""

from __future__ import annotations

import io
import time
import wave

import numpy as np
import pytest

from app.speech.audio import MAX_SECONDS, SAMPLE_RATE, AudioError, read_wav
from app.speech.transcriber import (
    SpeechModel,
    SpeechModelMissing,
    Transcriber,
    TranscriptionError,
    find_speech_model,
)


def wav_bytes(seconds: float, rate: int = SAMPLE_RATE, channels: int = 1, width: int = 2,
              amplitude: float = 0.3) -> bytes:
    """A 440 Hz tone (a note, in every channel) as a PCM WAV file."""
    time = np.arange(int(seconds * rate)) / rate
    tone = amplitude * np.sin(2 * np.pi * 440 * time)
    scale = {1: 127, 2: 32767, 4: 2**31 - 1}[width]
    values = np.repeat((tone * scale)[:, None], channels, axis=1)
    dtype = {1: np.uint8, 2: np.int16, 4: np.int32}[width]
    samples = (values + 128).astype(dtype) if width == 1 else values.astype(dtype)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(samples.tobytes())
    return buffer.getvalue()


def test_a_browser_recording_is_read_as_mono_16_khz_whatever_its_rate_width_and_channels():
    plain = read_wav(wav_bytes(2.0))
    assert plain.seconds == pytest.approx(2.0) and plain.samples.dtype == np.float32 and not plain.silent
    assert float(np.max(np.abs(plain.samples))) == pytest.approx(0.3, abs=0.01)
    stereo = read_wav(wav_bytes(1.5, rate=44_100, channels=2))  # a browser's own rate, resampled
    assert stereo.samples.size == int(round(1.5 * 44_100 * SAMPLE_RATE / 44_100))
    assert float(np.max(np.abs(stereo.samples))) == pytest.approx(0.3, abs=0.01)
    for width in (1, 4):
        assert read_wav(wav_bytes(0.5, width=width)).seconds == pytest.approx(0.5)
    assert read_wav(wav_bytes(1.0, amplitude=0.0)).silent


def test_what_cannot_be_read_is_refused_with_the_reason():
    with pytest.raises(AudioError, match="not a WAV file"):
        read_wav(b"ID3\x03 this is an mp3")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:  # 24-bit samples
        wav.setnchannels(1)
        wav.setsampwidth(3)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(b"\x00\x00\x00" * 10)
    with pytest.raises(AudioError, match="24-bit"):
        read_wav(buffer.getvalue())
    with pytest.raises(AudioError, match="longer than 10 minutes"):
        read_wav(wav_bytes(MAX_SECONDS + 1, rate=8000, width=1, amplitude=0.0))


def test_a_recording_is_transcribed_saying_how_far_it_is_and_what_is_heard_counts(tiny_whisper_dir):
    model = Transcriber(SpeechModel(tiny_whisper_dir, "tiny-whisper"))
    heard: list[tuple[int, int]] = []
    text = model.transcribe(read_wav(wav_bytes(3.0)), lambda done, total: heard.append((done, total)))
    assert heard == [(0, 1), (1, 1)]
    assert text.strip() and "<|" not in text  # words, without Whisper's special tokens
    assert model.transcribe(read_wav(wav_bytes(3.0))) == text  # greedy: the same recording, the same words
    assert model.transcribe(read_wav(wav_bytes(3.0, amplitude=0.01))) != text  # another sound, other words


def test_a_long_recording_goes_through_long_form_decoding_window_by_window(tiny_whisper_dir):
    model = Transcriber(SpeechModel(tiny_whisper_dir, "tiny-whisper"))
    heard: list[tuple[int, int]] = []
    text = model.transcribe(read_wav(wav_bytes(75.0)), lambda done, total: heard.append((done, total)))
    windows = [step for step in heard if step[1] > 1]  # Whisper's own: frames read of the frames in all
    assert len(windows) >= 3 and windows[0] == (0, 7500) and all(done < 7500 for done, _ in windows)
    assert [done for done, _ in windows] == sorted(done for done, _ in windows) and heard[-1] == (1, 1)
    assert text.strip()


def test_a_multilingual_model_is_asked_to_transcribe_and_finds_the_language_itself(tmp_path):
    from tests.tiny_whisper import build_tiny_whisper

    model = Transcriber(SpeechModel(build_tiny_whisper(tmp_path / "tiny-whisper-multilingual", multilingual=True),
                                    "multilingual"))
    assert model.transcribe(read_wav(wav_bytes(75.0))).strip()  # no "English-only" or language error


def test_the_speech_model_comes_from_the_library_or_the_setting_and_its_absence_says_what_to_fetch(
        tiny_whisper_dir, monkeypatch, tmp_path):
    from app.speech import transcriber

    def found() -> SpeechModel:
        transcriber._found.clear()  # the answer holds a minute: each step here asks again
        return find_speech_model()

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/models, LM Studio or Ollama of the machine's
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("DEMO_SPEECH_MODEL", raising=False)
    monkeypatch.setenv("DEMO_MODEL_DIRS", str(tmp_path / "nothing-here"))
    with pytest.raises(SpeechModelMissing) as missing:
        found()
    said = str(missing.value)
    assert "openai/whisper-base" in said and "Models" in said and "not sent anywhere" in said
    assert transcriber.speech_model_known() is False  # as found: the message box says so, without a search
    transcriber._found.clear()
    assert transcriber.speech_model_known() is None  # not known yet: looked for on a thread, the page goes on
    for _ in range(100):
        if transcriber.speech_model_known() is not None:
            break
        time.sleep(0.05)
    assert transcriber.speech_model_known() is False
    monkeypatch.setenv("DEMO_MODEL_DIRS", str(tiny_whisper_dir.parent))  # where the library looks
    assert found() == SpeechModel(tiny_whisper_dir, "tiny-whisper")
    elsewhere = tmp_path / "chosen"
    elsewhere.mkdir()
    monkeypatch.setenv("DEMO_SPEECH_MODEL", str(elsewhere))
    assert found() == SpeechModel(elsewhere, "chosen")
    monkeypatch.setenv("DEMO_SPEECH_MODEL", "someone/not-fetched")
    with pytest.raises(SpeechModelMissing, match="neither a folder nor a model in the Hugging Face cache: correct"):
        found()


def test_a_folder_that_is_no_speech_model_fails_to_load_with_the_reason(tiny_model_dir):
    with pytest.raises(TranscriptionError, match="could not be loaded"):
        Transcriber(SpeechModel(tiny_model_dir, "a chat model"))
