"""Speech to text on this machine: a Whisper-family model (transformers' AutoModelForSpeechSeq2Seq) from the model
library, loaded once per process and shared by every user (its weights are only read; one recording is transcribed
at a time), on the GPU when there is one. A recording up to 30 seconds is read in one go; a longer one with
Whisper's own long-form decoding (timestamps carry each window on from where speech ended), which reports how far
it is. Nothing leaves the machine."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import speech_model_setting
from app.speech.audio import SAMPLE_RATE, Recording

SHORT_FORM_SECONDS = 30  # what Whisper reads at once
RECOMMENDED = "openai/whisper-base"  # app/models/recommended.py: 290 MB, Apache-2.0
Progress = Callable[[int, int], None]  # (done, in all), in any unit: parts, or frames of the recording
_FIND_TTL_S = 60.0  # how long the model found stays the answer (the library scans the disk)
_RETRY_AFTER_S = 30.0  # a model that failed to load is tried again after this, not at every recording


class SpeechModelMissing(LookupError):
    """No speech-recognition model to use; the message says which one to fetch, and how."""


def _no_model() -> SpeechModelMissing:
    return SpeechModelMissing(
        "Voice input needs a speech-recognition model on this machine, and the model library has none. Fetch "
        f"**{RECOMMENDED}** (290 MB, Apache-2.0) on the **Models** page (start the app with "
        "`DEMO_ALLOW_DOWNLOADS=1` to allow downloads), or set `DEMO_SPEECH_MODEL` to a Whisper model's folder. "
        "Your recording was not sent anywhere.")


class TranscriptionError(RuntimeError):
    """The model could not be loaded or failed on this recording."""


@dataclass(frozen=True)
class SpeechModel:
    path: Path
    name: str  # as people know it: the Hub id, or the folder's name


def _seq2seq_architectures() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

    return set(MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES.values())


def find_speech_model() -> SpeechModel:
    """The model voice input uses: DEMO_SPEECH_MODEL (a folder, or a Hub id in the Hugging Face cache), else the
    first speech-to-text model (a sequence-to-sequence one, like Whisper) the library finds, by name. The answer
    holds for a minute. SpeechModelMissing when there is none."""
    setting = speech_model_setting()
    found = _found.get(setting)
    if found is not None and time.monotonic() - found[0] < _FIND_TTL_S:
        if isinstance(found[1], SpeechModelMissing):
            raise found[1]
        return found[1]
    try:
        model: SpeechModel | SpeechModelMissing = _find(setting)
    except SpeechModelMissing as exc:
        model = exc
    _found[setting] = (time.monotonic(), model)
    if isinstance(model, SpeechModelMissing):
        raise model
    return model


_found: dict[str, tuple[float, SpeechModel | SpeechModelMissing]] = {}  # per setting: when, and what


def _find(setting: str) -> SpeechModel:
    if setting:
        folder = Path(setting).expanduser()
        if folder.is_dir():
            return SpeechModel(folder, folder.name)
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

        try:
            return SpeechModel(Path(snapshot_download(setting, local_files_only=True)), setting)
        except (LocalEntryNotFoundError, HFValidationError, OSError):
            raise SpeechModelMissing(
                f"`DEMO_SPEECH_MODEL={setting}` is neither a folder nor a model in the Hugging Face cache: correct "
                "it, fetch that model on the Models page, or unset it to use a speech model the library finds. "
                "Your recording was not sent anywhere.") from None
    from app.models.discovery import discover

    usable = _seq2seq_architectures()
    for found in discover():
        files = found.files
        if files.kind == "speech" and files.format == "safetensors" and not files.problems \
                and files.architecture in usable:
            return SpeechModel(files.path, found.name)
    raise _no_model()


class Transcriber:
    """One loaded speech model."""

    def __init__(self, model: SpeechModel) -> None:
        import torch
        from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

        self.name = model.name
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = torch.float16 if self._device == "cuda" else torch.float32
        try:
            self._processor: Any = AutoProcessor.from_pretrained(model.path, local_files_only=True)
            self._model: Any = AutoModelForSpeechSeq2Seq.from_pretrained(
                model.path, local_files_only=True, dtype=dtype).to(self._device).eval()
        except Exception as exc:  # a broken or partial download fails in many ways: say which
            raise TranscriptionError(f"The speech model {model.name} could not be loaded: {exc}") from exc
        if not (hasattr(self._processor, "feature_extractor") and hasattr(self._processor, "tokenizer")):
            raise TranscriptionError(f"{model.name} is not a speech-to-text model this app can use (it has no "
                                     "feature extractor and tokenizer): choose a Whisper model.")
        self._dtype = dtype
        self._lock = threading.Lock()

    def transcribe(self, recording: Recording, progress: Progress | None = None) -> str:
        """The recording's text; `progress` hears how far it is."""
        import torch

        report = progress or (lambda done, total: None)
        generation = self._model.generation_config
        options: dict[str, Any] = {"task": "transcribe"} if getattr(generation, "is_multilingual", False) else {}
        extract = self._processor.feature_extractor
        long_form = recording.seconds > SHORT_FORM_SECONDS
        if long_form:  # the whole recording, windows chosen by the model (its timestamps)
            features = extract(recording.samples, sampling_rate=SAMPLE_RATE, return_tensors="pt", truncation=False,
                               padding="longest", return_attention_mask=True)
            options.update(attention_mask=features.attention_mask.to(self._device), return_timestamps=True,
                           monitor_progress=lambda seek: report(int(seek[0, 0]), int(seek[0, 1])))
        else:
            features = extract(recording.samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        report(0, 1)
        try:
            with self._lock, torch.inference_mode():
                ids = self._model.generate(features.input_features.to(self._device, self._dtype), **options)
        except Exception as exc:  # whatever the model raises, the page says it and goes on
            raise TranscriptionError(f"The speech model failed on this recording: {exc}") from exc
        report(1, 1)
        sequences = ids.sequences if hasattr(ids, "sequences") else ids
        return str(self._processor.batch_decode(sequences, skip_special_tokens=True)[0]).strip()


_loading = threading.Lock()  # one load at a time: two first recordings load the model once
_loaded: dict[Path, Transcriber] = {}
_failed: dict[Path, tuple[float, TranscriptionError]] = {}


def transcriber() -> Transcriber:
    """The speech model the settings or the library name, loaded once per process (the last one used is kept).
    SpeechModelMissing or TranscriptionError; a model that failed to load is not tried again for 30 s."""
    model = find_speech_model()
    key = model.path.resolve()
    with _loading:
        if key in _loaded:
            return _loaded[key]
        failed = _failed.get(key)
        if failed is not None and time.monotonic() - failed[0] < _RETRY_AFTER_S:
            raise failed[1]
        try:
            loaded = Transcriber(model)
        except TranscriptionError as exc:
            _failed[key] = (time.monotonic(), exc)
            raise
        _loaded.clear()  # another model was chosen: the old one's memory goes
        _loaded[key] = loaded
        return loaded
