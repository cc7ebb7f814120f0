"""A recording as the speech model reads it: mono samples in [-1, 1] at 16 kHz, from the WAV bytes a browser's
recorder sends (Streamlit's chat input records 16-bit PCM WAV at 16 kHz; other rates and widths are converted)."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000  # what Whisper's feature extractor reads
MAX_SECONDS = 600.0  # a longer recording is refused: ten minutes of speech is a long message already
_WIDTHS = {1: np.uint8, 2: np.int16, 4: np.int32}


class AudioError(ValueError):
    """A recording that cannot be read, with what to do about it."""


@dataclass(frozen=True)
class Recording:
    samples: np.ndarray  # float32, mono, SAMPLE_RATE
    seconds: float

    @property
    def silent(self) -> bool:
        return not self.samples.size or float(np.max(np.abs(self.samples))) < 1e-3


def read_wav(data: bytes) -> Recording:
    """The recording in `data` (a WAV file); AudioError when it is not one this reads, or is too long."""
    try:
        with wave.open(io.BytesIO(data), "rb") as wav:
            channels, width, rate, frames = (wav.getnchannels(), wav.getsampwidth(), wav.getframerate(),
                                             wav.getnframes())
            if width not in _WIDTHS:
                raise AudioError(f"The recording has {8 * width}-bit samples; 8, 16 or 32-bit PCM is read.")
            if not rate or frames / rate > MAX_SECONDS:
                raise AudioError(f"The recording is longer than {MAX_SECONDS / 60:.0f} minutes: record a shorter "
                                 "message.")
            raw = wav.readframes(frames)
    except (wave.Error, EOFError) as exc:
        raise AudioError(f"The recording is not a WAV file this can read ({exc}).") from None
    values = np.frombuffer(raw[: len(raw) - len(raw) % (width * channels)], dtype=_WIDTHS[width]).astype(np.float32)
    if width == 1:
        values = (values - 128.0) / 128.0
    else:
        values /= float(2 ** (8 * width - 1))
    mono = values.reshape(-1, channels).mean(axis=1) if channels > 1 else values
    if rate != SAMPLE_RATE and mono.size:
        count = int(round(mono.size * SAMPLE_RATE / rate))
        mono = np.interp(np.linspace(0, mono.size - 1, count), np.arange(mono.size), mono).astype(np.float32)
    return Recording(np.ascontiguousarray(mono, dtype=np.float32), mono.size / SAMPLE_RATE)
