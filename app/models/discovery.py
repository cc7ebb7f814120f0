"""The models already on this machine, and where each came from: the Hugging Face cache, ~/models, LM Studio's
models folder, Ollama's store, and folders the user adds (DEMO_MODEL_DIRS). Nothing is downloaded or loaded:
each model is described from its files (app/models/model_files.py).

- Hugging Face cache: `huggingface_hub.scan_cache_dir` lists its repositories; each snapshot that holds a model
  folder, and each .gguf file in one, is a model.
- LM Studio (`~/.lmstudio/models`, formerly `~/.cache/lm-studio/models`) and plain folders: .gguf files and model
  folders, a few levels down. A vision projector (`mmproj-*.gguf`) is a part of the model beside it, not a model.
- Ollama (`OLLAMA_MODELS`, else `~/.ollama/models`): each manifest under `manifests/` names the blob of its model
  layer (a GGUF file under `blobs/`), shown by its Ollama name (`llama3.2:3b`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from app.models.model_files import ModelFiles, is_model_folder, read_folder, read_gguf

_DEPTH = 3  # how far below a models folder a model may sit (LM Studio: publisher/repository/file.gguf)
_MANIFEST_BYTES = 1_000_000
_OLLAMA_MODEL = "application/vnd.ollama.image.model"


@dataclass(frozen=True)
class Source:
    """A place models are looked for: its kind decides how it is read."""

    label: str  # as the library shows it: "Hugging Face cache", "LM Studio", "Ollama", "~/models", a folder
    path: Path
    kind: str  # "hf-cache", "folder" or "ollama"


@dataclass(frozen=True)
class FoundModel:
    """A model on disk, with the place it was found."""

    files: ModelFiles
    source: str

    @property
    def name(self) -> str:
        return self.files.name


def default_sources(environ: Mapping[str, str] | None = None, home: Path | None = None,
                    embedded: bool = True) -> list[Source]:
    """Where models are looked for on this machine: the embedded SmolLM2 (its GGUF and the folder `make setup`
    converts it to), those of the user's tools that exist, then DEMO_MODEL_DIRS (folders separated by the OS's
    path separator)."""
    env = os.environ if environ is None else environ
    hf_cache = hf_cache_dir(environ, home)
    home = home or Path.home()
    ollama = Path(env["OLLAMA_MODELS"]).expanduser() if env.get("OLLAMA_MODELS") else home / ".ollama" / "models"
    candidates = _embedded() if embedded else []
    candidates += [
        Source("Hugging Face cache", hf_cache, "hf-cache"),
        Source("~/models", home / "models", "folder"),
        Source("LM Studio", home / ".lmstudio" / "models", "folder"),
        Source("LM Studio", home / ".cache" / "lm-studio" / "models", "folder"),
        Source("Ollama", ollama, "ollama"),
    ]
    for added in (env.get("DEMO_MODEL_DIRS") or "").split(os.pathsep):
        if added.strip():
            path = Path(added.strip()).expanduser()
            candidates.append(Source(str(path), path, "folder"))
    return [source for source in candidates if source.path.is_dir()]


def _embedded() -> list[Source]:
    from app.clients.embedded_model import EmbeddedModelMissing, embedded_model_dir, gguf_path

    sources = [Source("Embedded", embedded_model_dir(), "folder")]
    try:
        sources.append(Source("Embedded", gguf_path().parent, "folder"))
    except EmbeddedModelMissing:
        pass
    return sources


def hf_cache_dir(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """The Hugging Face cache, where huggingface_hub keeps (and the library fetches) models. For this process:
    huggingface_hub's own setting (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, as it reads them),
    so both always mean the same folder. For another environment (`environ`, `home`): HF_HUB_CACHE, else
    HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if environ is None and home is None:
        from huggingface_hub import constants

        return Path(constants.HF_HUB_CACHE).expanduser()
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return (home or Path.home()) / ".cache" / "huggingface" / "hub"


def discover(sources: list[Source] | None = None) -> list[FoundModel]:
    """Every model in `sources` (default: this machine's), each file or folder once, by name."""
    found: dict[Path, FoundModel] = {}
    for source in default_sources() if sources is None else sources:
        for model in _scan(source):
            key = _real(model.files.path)
            found.setdefault(key, model)
    return sorted(found.values(), key=lambda model: (model.name.casefold(), str(model.files.path)))


def describe_path(path: Path) -> FoundModel | None:
    """A .gguf file or a model folder the user typed or picked, described like a discovered one."""
    path = path.expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return FoundModel(read_gguf(path), "a path")
    if path.is_dir() and is_model_folder(path):
        return FoundModel(read_folder(path), "a path")
    return None


def _scan(source: Source) -> Iterator[FoundModel]:
    if source.kind == "hf-cache":
        yield from _hf_cache(source)
    elif source.kind == "ollama":
        yield from _ollama(source)
    else:
        yield from _folder(source.path, source.label, _DEPTH)


def _hf_cache(source: Source) -> Iterator[FoundModel]:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir(source.path)
    except (CacheNotFound, OSError, ValueError):
        return
    for repo in cache.repos:
        if repo.repo_type != "model":
            continue
        # The newest snapshot only: older revisions are the same model, kept until the cache is cleaned.
        revisions = sorted(repo.revisions, key=lambda revision: revision.last_modified, reverse=True)
        if not revisions:
            continue
        snapshot = Path(revisions[0].snapshot_path)
        if is_model_folder(snapshot):
            yield FoundModel(read_folder(snapshot, name=repo.repo_id), source.label)
        for gguf in _gguf_files(snapshot, _DEPTH):
            files = read_gguf(gguf)
            yield FoundModel(replace(files, name=f"{repo.repo_id}/{gguf.name}"), source.label)


def _folder(folder: Path, label: str, depth: int) -> Iterator[FoundModel]:
    if is_model_folder(folder):
        yield FoundModel(read_folder(folder), label)
        return
    for gguf in _gguf_files(folder, 0):
        yield FoundModel(read_gguf(gguf), label)
    if depth > 0:
        for child in _children(folder):
            if child.is_dir() and not child.name.startswith("."):
                yield from _folder(child, label, depth - 1)


def _gguf_files(folder: Path, depth: int) -> Iterator[Path]:
    """The model .gguf files in `folder` (and `depth` levels below it): not vision projectors, and of a model split
    in parts (`-00001-of-00003.gguf`) only the first part, which llama.cpp opens."""
    for child in _children(folder):
        if child.is_file() and child.suffix == ".gguf" and not child.name.startswith("mmproj") \
                and ("-of-" not in child.stem or "-00001-of-" in child.stem):
            yield child
        elif depth > 0 and child.is_dir() and not child.name.startswith("."):
            yield from _gguf_files(child, depth - 1)


def _ollama(source: Source) -> Iterator[FoundModel]:
    manifests = source.path / "manifests"
    if not manifests.is_dir():
        return
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        blob = _ollama_model_blob(source.path, manifest)
        if blob is None:
            continue
        files = read_gguf(blob)
        yield FoundModel(replace(files, name=_ollama_name(manifests, manifest)), source.label)


def _ollama_model_blob(store: Path, manifest: Path) -> Path | None:
    """The GGUF blob a manifest's model layer names (`sha256:<hex>` is stored as `blobs/sha256-<hex>`)."""
    try:
        if manifest.stat().st_size > _MANIFEST_BYTES:
            return None
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
    except (OSError, ValueError, AttributeError):
        return None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == _OLLAMA_MODEL:
            digest = str(layer.get("digest", ""))
            if not digest.startswith("sha256:") or not digest[7:].isalnum():
                return None
            blob = store / "blobs" / digest.replace(":", "-")
            return blob if blob.is_file() else None
    return None


def _ollama_name(manifests: Path, manifest: Path) -> str:
    """registry.ollama.ai/library/llama3.2/3b -> llama3.2:3b; another namespace or registry stays in the name."""
    parts = manifest.relative_to(manifests).parts
    if len(parts) < 2:
        return manifest.name
    *where, model, tag = parts
    if where[:2] == ["registry.ollama.ai", "library"]:
        where = []
    elif where[:1] == ["registry.ollama.ai"]:
        where = where[1:]
    return "/".join([*where, f"{model}:{tag}"])


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path
