"""What a model on disk is, read from its files alone (nothing is loaded): a GGUF file through its header
(app/clients/llamacpp/gguf_header.py), a Hugging Face folder through its config.json, tokenizer_config.json,
README.md and the safetensors headers. The model library (app/models/discovery.py) lists these; the memory estimate
at a chosen context (app/models/memory_at_context.py) reads the shape kept here.

A file that cannot be read is still described, with the reason, so the library shows it instead of dropping it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.clients.choice import gpu_present
from app.clients.llamacpp.gguf_header import read_header

Format = Literal["gguf", "safetensors"]
Kind = Literal["chat", "speech", "embedding"]  # what a model is for: the picker's chat, voice input, retrieval
_EMBEDDING_GGUF = {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "t5encoder", "modern-bert"}
_MAX_TEXT = 1_000_000  # a config, tokenizer config or README larger than this is not read (a hostile folder)
_LICENCE = re.compile(r"^licen[cs]e:\s*['\"]?([\w.+-]+)", re.MULTILINE)


@dataclass(frozen=True)
class Shape:
    """What the KV cache per token depends on: layers, KV heads and the size of each head."""

    layers: int
    kv_heads: int
    head_dim: int

    def kv_bytes_per_token(self, bytes_per_value: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value  # keys and values


@dataclass(frozen=True)
class ModelFiles:
    """One model as its files describe it. `path` is what the model picker takes: a .gguf file or a model folder."""

    path: Path
    name: str
    format: Format
    size_bytes: int
    quantization: str | None = None  # GGUF's file type (Q4_K_M...), or a folder's quantization method
    parameters: int | None = None
    context_length: int | None = None
    tools: bool = False  # its chat template renders tools
    thinking: bool = False  # its chat template has a thinking switch or thought tags
    vision: bool = False  # it reads pictures (a vision config, or a projector file beside a GGUF)
    licence: str | None = None
    architecture: str | None = None
    shape: Shape | None = None
    problems: tuple[str, ...] = field(default=())  # what could not be read, for the library to show
    kind: Kind = "chat"

    @property
    def engine(self) -> str:
        """The backend its format goes to here: GGUF to llama.cpp; a folder to vLLM where it is installed and an
        NVIDIA GPU is present, else to transformers."""
        if self.format == "gguf":
            return "llamacpp"
        return "vllm" if gpu_present() and importlib.util.find_spec("vllm") is not None else "hf"


# ----- GGUF -----------------------------------------------------------------------------------------------------

def read_gguf(path: Path) -> ModelFiles:
    """A GGUF file's metadata (its header only: gguf_header.py maps the file and reads no weights)."""
    size = _size(path)
    try:
        header = read_header(path)
    except Exception as exc:  # a truncated or hostile file: described by the error the reader raised
        return ModelFiles(path, path.stem, "gguf", size, problems=(f"not a readable GGUF file: {exc}",))
    fields, parameters = header.fields, header.tensor_elements
    arch = _text(fields.get("general.architecture"))
    key = (lambda name: f"{arch}.{name}") if arch else (lambda name: name)
    template = _text(fields.get("tokenizer.chat_template")) or ""
    heads = _int(fields.get(key("attention.head_count")))
    embedding = _int(fields.get(key("embedding_length")))
    layers = _int(fields.get(key("block_count")))
    kv_heads = _int(fields.get(key("attention.head_count_kv"))) or heads
    head_dim = _int(fields.get(key("attention.key_length"))) or (embedding // heads if embedding and heads else None)
    shape = Shape(layers, kv_heads, head_dim) if layers and kv_heads and head_dim else None
    projector = any(p.name.startswith("mmproj") and p.suffix == ".gguf" for p in _siblings(path))
    tools, thinking = _template_knows(template)
    return ModelFiles(
        path=path, name=_text(fields.get("general.name")) or path.stem, format="gguf", size_bytes=size,
        quantization=_file_type(fields.get("general.file_type")), parameters=parameters or None,
        context_length=_int(fields.get(key("context_length"))), licence=_text(fields.get("general.license")),
        architecture=arch, shape=shape, vision=projector, tools=tools, thinking=thinking,
        kind="embedding" if arch in _EMBEDDING_GGUF else "chat")


def _file_type(value: Any) -> str | None:
    number = _int(value)
    if number is None:
        return None
    from gguf import LlamaFileType

    try:
        name = LlamaFileType(number).name
    except ValueError:
        return f"file type {number}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _siblings(path: Path) -> list[Path]:
    try:
        return list(path.parent.iterdir())
    except OSError:
        return []


# ----- Hugging Face folders ---------------------------------------------------------------------------------------

def read_folder(folder: Path, name: str | None = None) -> ModelFiles:
    """A Hugging Face model folder: config.json, the chat template, the licence in its model card, and the
    parameter count from the safetensors headers (or their index)."""
    problems: list[str] = []
    config = _json(folder / "config.json", problems)
    text_config = config.get("text_config")
    merged = {**config, **(text_config if isinstance(text_config, dict) else {})}
    tokenizer_config = _json(folder / "tokenizer_config.json", problems, required=False)
    template = _template(folder, tokenizer_config)
    files = sorted(folder.glob("*.safetensors"))
    parameters = _safetensors_parameters(files, problems)
    quantization = config.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    heads = _int(merged.get("num_attention_heads"))
    kv_heads = _int(merged.get("num_key_value_heads")) or heads
    hidden = _int(merged.get("hidden_size"))
    head_dim = _int(merged.get("head_dim")) or (hidden // heads if hidden and heads else None)
    layers = _int(merged.get("num_hidden_layers"))
    shape = Shape(layers, kv_heads, head_dim) if layers and kv_heads and head_dim else None
    architectures = config.get("architectures")
    tools, thinking = _template_knows(template)
    return ModelFiles(
        path=folder, name=name or folder.name, format="safetensors",
        size_bytes=sum(_size(path) for path in files), quantization=str(method) if method else None,
        parameters=parameters, context_length=_int(merged.get("max_position_embeddings")),
        licence=_card_licence(folder / "README.md"),
        architecture=str(architectures[0]) if isinstance(architectures, list) and architectures else None,
        shape=shape, vision="vision_config" in config, problems=tuple(problems), tools=tools, thinking=thinking,
        kind=_folder_kind(folder, architectures, template))


def _folder_kind(folder: Path, architectures: Any, template: str) -> Kind:
    """Speech recognition (Whisper and other speech-to-text heads), a sentence-embedding model (a
    sentence-transformers folder, or an encoder with no chat template), else a chat model."""
    names = [str(name) for name in architectures] if isinstance(architectures, list) else []
    if any("Whisper" in name or name.endswith(("ForSpeechSeq2Seq", "ForCTC")) for name in names):
        return "speech"
    if (folder / "modules.json").is_file() or (
            not template and names and all(name.endswith(("Model", "ForMaskedLM")) for name in names)):
        return "embedding"
    return "chat"


def is_model_folder(folder: Path) -> bool:
    """A folder transformers can load: config.json and safetensors weights."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _template(folder: Path, tokenizer_config: dict[str, Any]) -> str:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file() and _size(jinja) <= _MAX_TEXT:
        return jinja.read_text(encoding="utf-8", errors="replace")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else ""


def _safetensors_parameters(files: list[Path], problems: list[str]) -> int | None:
    """The weights' element count, from each file's header (the safetensors library reads no tensor data)."""
    if not files:
        problems.append("no *.safetensors weights")
        return None
    from safetensors import safe_open

    total = 0
    for path in files:
        try:
            with safe_open(str(path), framework="numpy") as weights:
                total += sum(math.prod(weights.get_slice(name).get_shape()) for name in weights.keys())
        except Exception as exc:  # a truncated or hostile header
            problems.append(f"{path.name}: not a readable safetensors file ({exc})")
            return None
    return total


def _card_licence(readme: Path) -> str | None:
    """The `license:` of a model card's YAML front matter."""
    if not readme.is_file() or _size(readme) > _MAX_TEXT:
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    front = text[3:].split("\n---", 1)[0]
    found = _LICENCE.search(front)
    return found.group(1) if found else None


# ----- shared -----------------------------------------------------------------------------------------------------

def describe_count(parameters: int) -> str:
    """A parameter count as model cards say it: 135M, 7.6B; a tiny test model's 20,480 as it is."""
    if parameters < 1_000_000:
        return f"{parameters:,}"
    return f"{parameters / 1e6:.0f}M" if parameters < 1e9 else f"{parameters / 1e9:.1f}B"


def _template_knows(template: str) -> tuple[bool, bool]:
    """What a chat template renders: tools (it reads `tools`), and a thinking switch or thought tags."""
    return bool(re.search(r"\btools\b", template)), "enable_thinking" in template or "<think>" in template


def _json(path: Path, problems: list[str], required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            problems.append(f"no {path.name}")
        return {}
    if _size(path) > _MAX_TEXT:
        problems.append(f"{path.name} is larger than {_MAX_TEXT:,} bytes; not read")
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: {exc}")
        return {}
    return value if isinstance(value, dict) else {}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
