"""A short list of models worth fetching, each with its licence and why it is here, marked by whether it fits this
machine. Each names a repository and, for GGUF, a quantization: the file is picked from the repository's listing
when the user fetches it (app/models/hub.py), so a renamed file is found, not guessed.

Every entry is from its model's own publisher (or ggml-org, llama.cpp's own organization, for GGUF conversions),
under a licence that allows any use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.models.hub import Plan, Repository, folder_plan, gguf_plan
from app.models.model_files import Kind

Role = Literal["laptop", "vision", "reasoning", "gpu", "speech", "embedding"]
GIB = 1024**3


@dataclass(frozen=True)
class Recommendation:
    repo_id: str
    role: Role
    why: str
    licence: str
    approx_bytes: int  # on disk, for the list; the download checks the repository's real sizes
    memory_bytes: int  # to run it at a modest context: weights, KV cache and runtime
    kind: Kind = "chat"
    quantization: str | None = None  # GGUF: the file whose name carries it; None: the safetensors folder
    needs_gpu: bool = False

    def plan(self, repo: Repository) -> Plan:
        """What to fetch from the repository as it is now."""
        if self.quantization is None:
            return folder_plan(repo)
        wanted = self.quantization.casefold()
        for file in repo.gguf_choices:
            if wanted in file.name.casefold():
                return gguf_plan(repo, file.name)
        raise ValueError(f"{self.repo_id} no longer has a {self.quantization} GGUF file: pick one of its files "
                         "from the search instead.")


RECOMMENDED: tuple[Recommendation, ...] = (
    Recommendation(
        "ggml-org/Qwen3-1.7B-GGUF", "laptop", "Calls tools and can think before answering; llama.cpp runs it on "
        "a laptop CPU at reading speed. Far better answers than the embedded 135M model.", "apache-2.0",
        int(1.28 * 1e9), 3 * GIB, quantization="Q4_K_M"),
    Recommendation(
        "HuggingFaceTB/SmolVLM-256M-Instruct", "vision", "Reads pictures (describe, read text, answer about "
        "them) at 256M parameters, on a CPU with transformers.", "apache-2.0", int(0.51 * 1e9), 2 * GIB),
    Recommendation(
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "reasoning", "Reasons step by step in its thinking before it "
        "answers (maths, puzzles); small enough for a CPU.", "mit", int(3.55 * 1e9), 6 * GIB),
    Recommendation(
        "Qwen/Qwen3-8B", "gpu", "A strong all-round model with tools and thinking for vLLM on a 24 GB GPU.",
        "apache-2.0", int(16.4 * 1e9), 22 * GIB, needs_gpu=True),
    Recommendation(
        "Qwen/Qwen3-32B", "gpu", "Near the best open models at tools and reasoning, for vLLM on an 80 GB GPU.",
        "apache-2.0", int(65.5 * 1e9), 75 * GIB, needs_gpu=True),
    Recommendation(
        "openai/whisper-base", "speech", "Turns the microphone's recording into text for the chat input, locally.",
        "apache-2.0", int(0.29 * 1e9), 1 * GIB, kind="speech"),
    Recommendation(
        "sentence-transformers/all-MiniLM-L6-v2", "embedding", "Small and fast sentence embeddings for searching "
        "documents by meaning, next to full-text search. From its own publisher.", "apache-2.0", int(0.09 * 1e9),
        1 * GIB, kind="embedding"),
)


@dataclass(frozen=True)
class Fit:
    recommendation: Recommendation
    fits: bool
    reason: str  # why it does not fit, or on what it runs


def for_machine(memory_bytes: int | None, gpu_bytes: int | None) -> list[Fit]:
    """Each recommendation, with whether this machine runs it: GPU models need an NVIDIA GPU with the memory, the
    others the machine's RAM (or the GPU's)."""
    fits = []
    for item in RECOMMENDED:
        if item.needs_gpu:
            ok = gpu_bytes is not None and gpu_bytes >= item.memory_bytes
            reason = ("runs on this GPU with vLLM" if ok else
                      f"needs an NVIDIA GPU with {item.memory_bytes / GIB:.0f} GiB of memory and vLLM")
        else:
            room = max(memory_bytes or 0, gpu_bytes or 0)
            ok = memory_bytes is None or room >= item.memory_bytes
            reason = "runs here" if ok else f"needs about {item.memory_bytes / GIB:.0f} GiB of memory"
        fits.append(Fit(item, ok, reason))
    return sorted(fits, key=lambda fit: not fit.fits)
