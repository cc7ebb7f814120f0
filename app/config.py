"""Settings read from environment variables, in one place, so the pages, the server and the tests agree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models live; DEMO_CACHE_DIR overrides the XDG cache location."""
    explicit = os.environ.get("DEMO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "composite-demo"


@dataclass(frozen=True)
class ModelSettings:
    """How to load a local model. Frozen and hashable: it is the cache key of the loaded backend."""

    backend: str = "hf"
    model_path: str = ""
    device: str = "auto"
    dtype: str = "auto"
    max_context_tokens: int = 0  # 0: take the model's own context window

    @classmethod
    def from_env(cls) -> ModelSettings:
        return cls(
            backend=os.environ.get("DEMO_BACKEND", "hf"),
            model_path=os.environ.get("DEMO_MODEL", ""),
            device=os.environ.get("DEMO_DEVICE", "auto"),
            dtype=os.environ.get("DEMO_DTYPE", "auto"),
            max_context_tokens=int(os.environ.get("DEMO_MAX_CONTEXT", "0") or 0),
        )


def offline_by_default() -> None:
    """Never reach a model hub unless the user explicitly opted in with DEMO_ALLOW_DOWNLOADS=1."""
    if os.environ.get("DEMO_ALLOW_DOWNLOADS") != "1":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
