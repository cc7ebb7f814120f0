"""Whether a model on disk fits before it is loaded, at the context length the user chose: its weights, by the
same rules Compare's check uses (app/clients/memory_fit.py `need_for`), plus the KV cache that context takes,
against the memory free where it would load (RAM, or the GPU)."""

from __future__ import annotations

from dataclasses import dataclass

from app.clients.memory_fit import MemoryNeed, Place, describe_bytes, free_bytes, need_for
from app.config import ModelSettings
from app.models.model_files import ModelFiles

HEADROOM = 0.9  # as Compare's check: the rest of what is free is left for the OS, the page and the answers


@dataclass(frozen=True)
class ContextFit:
    """The estimate for one model at one context length, and what is free where it would load."""

    weights: MemoryNeed
    kv_cache_bytes: int | None
    context: int
    free_bytes: int | None

    @property
    def total_bytes(self) -> int | None:
        if self.weights.bytes is None:
            return None
        return self.weights.bytes + (self.kv_cache_bytes or 0)

    @property
    def fits(self) -> bool | None:
        """None when either figure is unknown: such a model is shown, never refused."""
        if self.total_bytes is None or self.free_bytes is None:
            return None
        return self.total_bytes <= HEADROOM * self.free_bytes

    def describe(self) -> str:
        """One sentence for the library: the estimate, its parts, and the verdict."""
        place = self.weights.where
        if self.total_bytes is None:
            return f"Memory needed: unknown ({self.weights.detail})."
        kv = (f" + KV cache {describe_bytes(self.kv_cache_bytes)} at {self.context:,} tokens"
              if self.kv_cache_bytes else "")
        text = f"About {describe_bytes(self.total_bytes)} of {place}: {self.weights.detail}{kv}."
        if self.free_bytes is None:
            return text
        verdict = "fits in" if self.fits else "does not fit in"
        return f"{text} It {verdict} the {describe_bytes(self.free_bytes)} free now."


def fit_at_context(model: ModelFiles, context: int | None = None, settings: ModelSettings | None = None,
                   free: dict[Place, int | None] | None = None) -> ContextFit:
    """The estimate for `model` loaded with `settings` (default: its format's engine, automatic device and
    precision) at `context` tokens (default: the model's own window). `free` overrides the machine's free memory
    (tests)."""
    settings = settings or ModelSettings(backend=model.engine, model_path=str(model.path))
    weights = need_for(settings)
    context = context or model.context_length or 0
    kv = None
    if model.shape is not None and context and weights.where != "remote":
        kv = context * model.shape.kv_bytes_per_token(_kv_value_bytes(model, settings, weights.where))
    if weights.where == "remote":
        available = None
    elif free is not None:
        available = free.get(weights.where)
    else:
        available = free_bytes(weights.where)
    return ContextFit(weights, kv, context, available)


def _kv_value_bytes(model: ModelFiles, settings: ModelSettings, where: str) -> int:
    """llama.cpp keeps keys and values in float16 by default; transformers in the dtype it loads (float32 on a CPU
    by this app's rule for "auto", bfloat16 on a GPU); vLLM in 16 bits."""
    if model.format == "gguf" or settings.backend == "vllm":
        return 2
    if settings.dtype == "auto":
        return 2 if where == "GPU" else 4
    return 4 if settings.dtype in ("float32", "float") else 2
