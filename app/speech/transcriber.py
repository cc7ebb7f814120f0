"""Speech to text on this machine: a Whisper-family model (transformers' AutoModelForSpeechSeq2Seq) from the model
library, loaded once per process and shared by every user (its weights are only read; one transcription runs at
a time), writing a recording's text 30 seconds at a time and saying how far it is. Nothing leaves the machine."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.config import speech_model_setting
from app.speech.audio import SAMPLE_RATE, Recording

CHUNK_SECONDS = 30  # what Whisper reads at once
RECOMMENDED = "openai/whisper-base"  # app/models/recommended.py: 290 MB, Apache-2.0
Progress = Callable[[int, int], None]  # (chunks done, chunks in all)


class SpeechModelMissing(LookupError):
    """No speech-recognition model on this machine; the message says which one to fetch, and how."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            (f"{detail} " if detail else "") + "Voice input needs a speech-recognition model on this machine, and "
            f"the model library has none. Fetch **{RECOMMENDED}** (290 MB, Apache-2.0) on the **Models** page "
            "(start the app with `DEMO_ALLOW_DOWNLOADS=1` to allow downloads), or set `DEMO_SPEECH_MODEL` to a "
            "Whisper model's folder. Your recording was not sent anywhere.")


class TranscriptionError(RuntimeError):
    """The model could not be loaded or failed on this recording."""


def speech_model_path() -> Path:
    """The model voice input uses: DEMO_SPEECH_MODEL (a folder, or a Hub id in the Hugging Face cache), else the
    first speech model the library finds (by name). SpeechModelMissing when there is none."""
    setting = speech_model_setting()
    if setting:
        folder = Path(setting).expanduser()
        if folder.is_dir():
            return folder
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

        try:
            return Path(snapshot_download(setting, local_files_only=True))
        except (LocalEntryNotFoundError, HFValidationError, OSError):
            raise SpeechModelMissing(f"DEMO_SPEECH_MODEL={setting!r} is neither a folder nor a model in the "
                                     "Hugging Face cache.") from None
    from app.models.discovery import discover

    for found in discover():
        if found.files.kind == "speech" and found.files.format == "safetensors" and not found.files.problems:
            return found.files.path
    raise SpeechModelMissing()


class Transcriber:
    """One loaded speech model."""

    def __init__(self, folder: Path) -> None:
        import torch
        from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

        self.folder = folder
        self.name = folder.name
        try:
            self._processor: Any = AutoProcessor.from_pretrained(folder, local_files_only=True)
            self._model: Any = AutoModelForSpeechSeq2Seq.from_pretrained(folder, local_files_only=True,
                                                                         dtype=torch.float32).eval()
        except (OSError, ValueError) as exc:
            raise TranscriptionError(f"The speech model in {folder} could not be loaded: {exc}") from exc
        self._lock = threading.Lock()

    def transcribe(self, recording: Recording, progress: Progress | None = None) -> str:
        """The recording's text; `progress` hears after each 30-second chunk."""
        import torch

        step = CHUNK_SECONDS * SAMPLE_RATE
        chunks = [recording.samples[start : start + step] for start in range(0, recording.samples.size, step)]
        texts: list[str] = []
        generation = self._model.generation_config
        options: dict[str, Any] = {"task": "transcribe"} if getattr(generation, "is_multilingual", False) else {}
        for done, chunk in enumerate(chunks, start=1):
            features = self._processor.feature_extractor(chunk, sampling_rate=SAMPLE_RATE, return_tensors="pt")
            try:
                with self._lock, torch.inference_mode():
                    ids = self._model.generate(features.input_features, **options)  # to its max_length
            except (RuntimeError, ValueError) as exc:
                raise TranscriptionError(f"The speech model failed on this recording: {exc}") from exc
            texts.append(self._processor.batch_decode(ids, skip_special_tokens=True)[0].strip())
            if progress is not None:
                progress(done, len(chunks))
        return " ".join(text for text in texts if text)


_loading = threading.Lock()


def transcriber() -> Transcriber:
    """The speech model the settings or the library name, loaded once per process and path. SpeechModelMissing
    or TranscriptionError."""
    path = speech_model_path()
    with _loading:
        return _loaded(path.resolve())


@functools.lru_cache(maxsize=1)
def _loaded(path: Path) -> Transcriber:
    return Transcriber(path)
