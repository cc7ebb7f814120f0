"""Speech to text on this machine: a Whisper-family model (transformers' AutoModelForSpeechSeq2Seq) from the model
library, loaded once per process and shared by every user (its weights are only read; one recording is transcribed
at a time), on the GPU when there is one. A recording up to 30 seconds is read in one go; a longer one with
Whisper's own long-form decoding (timestamps carry each window on from where speech ended), which reports how far
it is. Nothing leaves the machine."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.clients.transformers_loading import transformers_loading
from app.config import speech_model_setting
from app.speech.audio import SAMPLE_RATE, Recording

log = logging.getLogger(__name__)
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


def _usable(architecture: str | None) -> bool:
    """A sequence-to-sequence speech model (Whisper's ...ForConditionalGeneration): what AutoModelForSpeechSeq2Seq
    loads. Not a CTC model, nor Whisper's classification or decoder-only heads."""
    return bool(architecture) and str(architecture).endswith(("ForConditionalGeneration", "ForSpeechSeq2Seq"))


def find_speech_model(fresh: bool = False) -> SpeechModel:
    """The model voice input uses: DEMO_SPEECH_MODEL (a folder, or a Hub id in the Hugging Face cache), else the
    first speech-to-text model (a sequence-to-sequence one, like Whisper) the library finds, by name. The answer
    holds for a minute unless `fresh`. SpeechModelMissing when there is none."""
    setting = speech_model_setting()
    found = _found.get(setting)
    if not fresh and found is not None and time.monotonic() - found[0] < _FIND_TTL_S:
        if isinstance(found[1], str):
            raise SpeechModelMissing(found[1])  # a new one each time: a kept exception keeps its tracebacks
        return found[1]
    try:
        model: SpeechModel | str = _find(setting)
    except SpeechModelMissing as exc:
        model = str(exc)
    _found[setting] = (time.monotonic(), model)
    if isinstance(model, str):
        raise SpeechModelMissing(model)
    return model


def speech_model_known() -> bool | None:
    """Whether there is a speech model, as last found; None when not known yet (or a minute old). Never waits: it
    looks again on a thread of its own (the library reads every model file's header), for the next call."""
    found = _found.get(speech_model_setting())
    if found is not None and time.monotonic() - found[0] < _FIND_TTL_S:
        return not isinstance(found[1], str)
    if _looking.acquire(blocking=False):
        def look() -> None:
            try:
                find_speech_model(fresh=True)
            except SpeechModelMissing:
                pass
            except Exception as exc:  # a folder that cannot be read: no model, said, and not looked for again
                log.warning("Looking for a speech model failed", exc_info=True)
                _found[speech_model_setting()] = (time.monotonic(), f"The model library could not be read: {exc}")
            finally:
                _looking.release()
        threading.Thread(target=look, name="find-speech-model", daemon=True).start()
    return None


_found: dict[str, tuple[float, SpeechModel | str]] = {}  # per setting: when, and the model or why there is none
_looking = threading.Lock()


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

    for found in discover():
        files = found.files
        if files.kind == "speech" and files.format == "safetensors" and not files.problems \
                and _usable(files.architecture):
            return SpeechModel(files.path, found.name)
    raise _no_model()


class Transcriber:
    """One loaded speech model."""

    def __init__(self, model: SpeechModel) -> None:
        import torch
        from transformers import AutoModelForSpeechSeq2Seq, AutoProcessor

        self.name = model.name
        try:
            self._processor: Any = AutoProcessor.from_pretrained(model.path, local_files_only=True)
            self._device, self._dtype = "cpu", torch.float32
            self._model: Any = None
            if torch.cuda.is_available():  # beside a chat model the GPU may be full: then the CPU
                try:
                    with transformers_loading():
                        loaded = AutoModelForSpeechSeq2Seq.from_pretrained(model.path, local_files_only=True,
                                                                           dtype=torch.float16)
                    self._model = loaded.to("cuda").eval()
                    self._device, self._dtype = "cuda", torch.float16
                except torch.cuda.OutOfMemoryError:
                    self._model = None
                    torch.cuda.empty_cache()
            if self._model is None:
                with transformers_loading():
                    self._model = AutoModelForSpeechSeq2Seq.from_pretrained(
                        model.path, local_files_only=True, dtype=torch.float32).eval()
        except Exception as exc:  # a broken or partial download fails in many ways: say which
            raise TranscriptionError(f"The speech model {model.name} could not be loaded: {exc}") from None
        if not (hasattr(self._processor, "feature_extractor") and hasattr(self._processor, "tokenizer")):
            raise TranscriptionError(f"{model.name} is not a speech-to-text model this app can use (it has no "
                                     "feature extractor and tokenizer): choose a Whisper model.")
        self._lock = threading.Lock()

    def transcribe(self, recording: Recording, progress: Progress | None = None) -> str:
        """The recording's text; `progress` hears how far it is."""
        import torch

        report = progress or (lambda done, total: None)
        generation = self._model.generation_config
        options: dict[str, Any] = {"task": "transcribe"} if getattr(generation, "is_multilingual", False) else {}
        extract = self._processor.feature_extractor
        report(0, 1)
        try:
            if recording.seconds > SHORT_FORM_SECONDS:  # the whole recording, windows chosen by its timestamps
                features = extract(recording.samples, sampling_rate=SAMPLE_RATE, return_tensors="pt",
                                   truncation=False, padding="longest", return_attention_mask=True)
                options.update(attention_mask=features.attention_mask.to(self._device), return_timestamps=True,
                               monitor_progress=lambda seek: report(int(seek[0, 0]), int(seek[0, 1])))
            else:
                features = extract(recording.samples, sampling_rate=SAMPLE_RATE, return_tensors="pt")
            with self._lock, torch.inference_mode():
                ids = self._model.generate(features.input_features.to(self._device, self._dtype), **options)
            sequences = ids.sequences if hasattr(ids, "sequences") else ids
            text = str(self._processor.batch_decode(sequences, skip_special_tokens=True)[0]).strip()
        except Exception as exc:  # whatever the model raises, the page says it and goes on
            raise TranscriptionError(f"The speech model failed on this recording: {exc}") from None
        report(1, 1)
        return text


_loading = threading.Lock()  # one load at a time: two first recordings load the model once
_loaded: dict[Path, Transcriber] = {}
_failed: dict[Path, tuple[float, str]] = {}  # a model that failed to load: when, and why


def transcriber() -> Transcriber:
    """The speech model the settings or the library name (looked for again: one may have just been fetched),
    loaded once per process (the last one used is kept). SpeechModelMissing or TranscriptionError; a model that
    failed to load is not tried again for 30 s."""
    model = find_speech_model(fresh=True)
    key = model.path.resolve()
    with _loading:
        if key in _loaded:
            return _loaded[key]
        failed = _failed.get(key)
        if failed is not None and time.monotonic() - failed[0] < _RETRY_AFTER_S:
            raise TranscriptionError(failed[1])
        try:
            loaded = Transcriber(model)
        except TranscriptionError as exc:
            _failed[key] = (time.monotonic(), str(exc))
            raise
        _loaded.clear()  # another model was chosen: the old one's memory goes
        _loaded[key] = loaded
        return loaded
