"""Which backend the app starts on when the settings name none (DEMO_BACKEND unset): the fastest one that really
runs here.

- On a CPU, the embedded model (or any .gguf) runs on llama.cpp: it decodes 3-4x faster than transformers there.
  Only a build that has answered a token on this machine counts (app/clients/llamacpp/probe.py); otherwise the app
  starts on transformers and says why.
- With an NVIDIA GPU, transformers on CUDA (vLLM once installed and chosen): the binding is built for the CPU unless
  CMAKE_ARGS asked for CUDA.
- A model folder (safetensors) is read by transformers.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DefaultChoice:
    backend: str
    why_not_llamacpp: str | None = None  # why the fast CPU engine is not the one, when it is not

    def describe(self) -> str:
        if self.backend == "llamacpp":
            return "Engine: llama.cpp (the fastest on this CPU), in a process of its own."
        name = {"hf": "Hugging Face transformers"}.get(self.backend, self.backend)
        return f"Engine: {name}" + (f". llama.cpp is not used: {self.why_not_llamacpp}." if self.why_not_llamacpp
                                    else ".")


def gpu_present() -> bool:
    """An NVIDIA driver is loaded (asked without importing torch)."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


@functools.cache
def default_choice(model_path: str = "") -> DefaultChoice:
    """The backend for `model_path` (empty: the embedded SmolLM2) when DEMO_BACKEND names none."""
    path = model_path.strip()
    if path and not path.endswith(".gguf"):
        return DefaultChoice("hf")
    if gpu_present():
        return DefaultChoice("hf", "a GPU is present, and transformers on CUDA serves it")
    from app.clients.llamacpp.probe import usable

    verdict = usable()
    return DefaultChoice("llamacpp") if verdict.ok else DefaultChoice("hf", verdict.reason)


def default_backend(model_path: str = "") -> str:
    return os.environ.get("DEMO_BACKEND", "").strip() or default_choice(model_path).backend


def fallback_note() -> str | None:
    """Why the app started on transformers where llama.cpp would have been the default (None when it was chosen,
    or when the settings named the backend)."""
    if os.environ.get("DEMO_BACKEND", "").strip():
        return None
    choice = default_choice(os.environ.get("DEMO_MODEL", ""))
    if choice.backend == "llamacpp" or choice.why_not_llamacpp is None:
        return None
    return f"llama.cpp, the faster engine on a CPU, is not used: {choice.why_not_llamacpp}."


def main(argv: list[str]) -> int:
    """Print the engine the app starts on for the model path in `argv` (default: DEMO_MODEL, else the embedded one)."""
    named = os.environ.get("DEMO_BACKEND", "").strip()
    if named:
        print(f"Engine: {named} (DEMO_BACKEND).")
    else:
        print(default_choice(argv[0] if argv else os.environ.get("DEMO_MODEL", "")).describe())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
