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


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True)
class VLLMOptions:
    """vLLM engine options (ignored by the other backends)."""

    gpu_memory_utilization: float = 0.0  # share of GPU memory vLLM takes (of RAM on CPU); 0: 0.9 on GPU, 0.3 on CPU
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str = "mp"  # "mp" (one machine) or "ray" (several)
    enforce_eager: bool = False
    quantization: str = ""  # "" lets vLLM read it from the model's config (awq, gptq, fp8...)

    @classmethod
    def from_env(cls) -> VLLMOptions:
        return cls(
            gpu_memory_utilization=float(os.environ.get("DEMO_VLLM_GPU_MEMORY_UTILIZATION", "0") or 0),
            tensor_parallel_size=_int("DEMO_VLLM_TENSOR_PARALLEL_SIZE", 1),
            pipeline_parallel_size=_int("DEMO_VLLM_PIPELINE_PARALLEL_SIZE", 1),
            distributed_executor_backend=os.environ.get("DEMO_VLLM_EXECUTOR", "mp") or "mp",
            enforce_eager=os.environ.get("DEMO_VLLM_ENFORCE_EAGER", "") == "1",
            quantization=os.environ.get("DEMO_VLLM_QUANTIZATION", ""),
        )


@dataclass(frozen=True)
class ModelSettings:
    """Which backend and model. Frozen and hashable: it is the cache key of the loaded backend."""

    backend: str = "hf"
    model_path: str = ""  # hf, vllm: a local model folder ("" = the embedded SmolLM2)
    device: str = "auto"
    dtype: str = "auto"
    max_context_tokens: int = 0  # 0: take the model's own context window
    api_base_url: str = "http://127.0.0.1:8000/v1"  # openai: any OpenAI-compatible server
    api_key: str = ""
    api_model: str = ""  # openai: "" = the first model the server lists
    vllm: VLLMOptions = VLLMOptions()

    @classmethod
    def from_env(cls) -> ModelSettings:
        return cls(
            backend=os.environ.get("DEMO_BACKEND", "hf"),
            model_path=os.environ.get("DEMO_MODEL", ""),
            device=os.environ.get("DEMO_DEVICE", "auto"),
            dtype=os.environ.get("DEMO_DTYPE", "auto"),
            max_context_tokens=_int("DEMO_MAX_CONTEXT", 0),
            api_base_url=os.environ.get("DEMO_API_BASE_URL", cls.api_base_url),
            api_key=os.environ.get("DEMO_API_KEY", ""),
            api_model=os.environ.get("DEMO_API_MODEL", ""),
            vllm=VLLMOptions.from_env(),
        )


def offline_by_default() -> None:
    """Never reach a model hub unless the user explicitly opted in with DEMO_ALLOW_DOWNLOADS=1."""
    if os.environ.get("DEMO_ALLOW_DOWNLOADS") != "1":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
