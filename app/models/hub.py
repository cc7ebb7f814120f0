"""The Hugging Face Hub, reached only when the user allows the network (DEMO_ALLOW_DOWNLOADS=1): search by name, a
repository's files (each GGUF quantization, or the whole safetensors folder), and what of them is already in the
local cache. Everything goes through `huggingface_hub` against HF_ENDPOINT (https://huggingface.co unless set).

What to fetch is a `Plan`: a repository at one commit and the files to take from it. Downloading a plan, with
progress, cancel and checksums, is app/models/downloads.py; files land in the Hugging Face cache, where the library
(app/models/discovery.py) lists them with the other models on the machine.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.clients.memory_fit import describe_bytes
from app.config import downloads_allowed
from app.models.discovery import hf_cache_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
# Weights in formats the app does not load (pickles, TensorFlow, Flax, ONNX...): a folder download leaves them out.
_OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".onnx_data", ".ot", ".tflite",
                  ".mlmodel", ".pb", ".gguf", ".nemo", ".keras")
_OTHER_FORMAT_FOLDERS = ("onnx/", "openvino/", "coreml/", "tf/", "flax/", "original/", "gguf/", "mlx/")
_COMMIT = re.compile(r"[0-9a-f]{40}")  # a git commit or blob id
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SPLIT_GGUF = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})\.gguf$")
# Licences a download needs no extra acknowledgement for: open-source ones that allow any use.
_PERMISSIVE = {"apache-2.0", "mit", "bsd", "bsd-2-clause", "bsd-3-clause", "cc0-1.0", "cc-by-4.0", "unlicense",
               "openrail", "artistic-2.0", "isc", "zlib", "mpl-2.0", "bsl-1.0"}
# Space kept free on the cache's disk beyond what a download needs (logs, the OS, the next write).
SPACE_MARGIN = 256 * 1024 * 1024


class HubUnavailable(Exception):
    """Fetching is off, the Hub could not be reached, or it refused: the message says which and what to do."""


class NotEnoughSpace(Exception):
    """A download would not fit on the cache's disk: refused before any byte is fetched."""


@dataclass(frozen=True)
class HubModel:
    """A search result: enough to choose which repository to open."""

    repo_id: str
    downloads: int
    likes: int
    gated: str | None  # "auto" or "manual" when its owner asks users to accept terms first
    licence: str | None
    task: str | None  # the Hub's pipeline tag: text-generation, image-text-to-text, automatic-speech-recognition...
    has_gguf: bool


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository, with what its download is checked against."""

    name: str
    size: int
    sha256: str | None  # large (LFS) files: the SHA-256 of their bytes
    blob_id: str | None  # the others: git's blob id, the SHA-1 of "blob <size>\0" and their bytes

    @property
    def etag(self) -> str | None:
        """The name huggingface_hub gives its blob in the cache."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class Repository:
    """A model repository at one commit."""

    repo_id: str
    revision: str
    gated: str | None
    licence: str | None
    task: str | None
    files: tuple[RemoteFile, ...]

    @property
    def gguf_choices(self) -> list[RemoteFile]:
        """The GGUF files a user picks among: one per quantization (the first part of a split one), no projectors."""
        chosen = []
        for file in self.files:
            base = file.name.rsplit("/", 1)[-1]
            if not base.endswith(".gguf") or base.startswith("mmproj"):
                continue
            split = _SPLIT_GGUF.match(base)
            if split and split.group("part") != "00001":
                continue
            chosen.append(file)
        return chosen

    @property
    def has_safetensors_folder(self) -> bool:
        names = {file.name for file in self.files}
        return "config.json" in names and any(name.endswith(".safetensors") and "/" not in name for name in names)

    @property
    def needs_acknowledgement(self) -> bool:
        """Gated, or under a licence with conditions of its own (not one that allows any use)."""
        return bool(self.gated) or (self.licence or "").casefold() not in _PERMISSIVE


@dataclass(frozen=True)
class Plan:
    """What one download fetches: a repository's files at one commit. `main` is what the model picker loads: the
    GGUF file, or "" for the whole folder."""

    repo_id: str
    revision: str
    main: str
    files: tuple[RemoteFile, ...]

    @property
    def total_bytes(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def key(self) -> str:
        """One download per plan at a time: the same repository, commit and choice."""
        return f"{self.repo_id}@{self.revision}:{self.main or '*'}"

    @property
    def label(self) -> str:
        return f"{self.repo_id} · {self.main}" if self.main else f"{self.repo_id} (safetensors folder)"


def endpoint() -> str:
    """The Hub contacted: HF_ENDPOINT, else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def require_network() -> None:
    """Refuses, with what to do, unless the user allowed fetching."""
    if not downloads_allowed():
        raise HubUnavailable(
            "Fetching models is off: the app contacts no model hub unless it is started with DEMO_ALLOW_DOWNLOADS=1. "
            "The library lists the models already on this machine.")
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise HubUnavailable("HF_HUB_OFFLINE is set, so huggingface_hub refuses to contact the Hub: unset it (and "
                             "TRANSFORMERS_OFFLINE) to fetch models.")


def search(query: str, limit: int = 20) -> list[HubModel]:
    """Models whose name contains `query`, most downloaded first."""
    require_network()
    from huggingface_hub import HfApi

    try:
        found = list(HfApi(endpoint=endpoint()).list_models(search=query.strip(), sort="downloads", limit=limit))
    except Exception as exc:
        raise _unavailable(exc, query) from exc
    # What a server sends is taken as it comes only where it has the type it should; a repeated id is shown once.
    results: dict[str, HubModel] = {}
    for model in found:
        if not isinstance(model.id, str) or model.id in results:
            continue
        tags = _strings(model.tags)
        results[model.id] = HubModel(
            repo_id=model.id, downloads=_count(model.downloads), likes=_count(model.likes),
            gated=_gated(model.gated), licence=_licence(None, tags), task=_text(model.pipeline_tag),
            has_gguf="gguf" in tags or model.library_name == "gguf")
    return list(results.values())


def repository(repo_id: str, token: str | None = None) -> Repository:
    """A repository's files with their sizes and checksums, at its current commit."""
    require_network()
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:  # the id names a folder in the cache: "org/name" only, nothing that climbs out of it
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise HubUnavailable(f"{repo_id!r} is not a repository id (org/name): {exc}") from exc
    try:
        info = HfApi(endpoint=endpoint(), token=token or None).model_info(repo_id, files_metadata=True)
    except Exception as exc:
        raise _unavailable(exc, repo_id) from exc
    files = [file for file in (_remote_file(sibling) for sibling in info.siblings or []) if file is not None]
    try:
        card = info.card_data.to_dict() if info.card_data is not None else {}
    except Exception:  # a model card's metadata the library cannot turn back into a mapping: no licence from it
        card = {}
    if not isinstance(info.sha, str) or not _COMMIT.fullmatch(info.sha):
        raise HubUnavailable(f"{endpoint()} did not give {repo_id}'s commit as a git commit id; try again.")
    return Repository(repo_id=repo_id, revision=info.sha, gated=_gated(info.gated),
                      licence=_licence(card if isinstance(card, dict) else {}, _strings(info.tags)),
                      task=_text(info.pipeline_tag), files=tuple(files))


def _remote_file(sibling: Any) -> RemoteFile | None:
    """A listed file, or None for one that could not be fetched safely: a name that climbs out of the repository
    (`..`, an absolute path, a backslash), or a checksum that is not one (its value names the file on disk)."""
    name, size, lfs = sibling.rfilename, sibling.size, sibling.lfs
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name \
            or any(part in ("", ".", "..") for part in name.split("/")):
        return None
    sha256 = lfs.sha256 if lfs is not None else None
    blob_id = None if lfs is not None else sibling.blob_id
    if not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)) \
            and not (isinstance(blob_id, str) and _COMMIT.fullmatch(blob_id)):
        return None
    size = size if isinstance(size, int) else (lfs.size if lfs is not None else None)
    if not isinstance(size, int) or size < 0:
        return None
    return RemoteFile(name=name, size=size, sha256=sha256 if lfs is not None else None, blob_id=blob_id)


def gguf_plan(repo: Repository, filename: str) -> Plan:
    """One GGUF file (all its parts when split), and the repository's vision projector when it has one."""
    chosen = next((file for file in repo.gguf_choices if file.name == filename), None)
    if chosen is None:
        raise HubUnavailable(f"{repo.repo_id} has no GGUF file {filename!r}.")
    folder, _, base = chosen.name.rpartition("/")
    split = _SPLIT_GGUF.match(base)
    parts = [chosen]
    if split:
        parts = [file for file in repo.files if file.name.rpartition("/")[0] == folder
                 and (match := _SPLIT_GGUF.match(file.name.rpartition("/")[2])) is not None
                 and (match.group("stem"), match.group("parts")) == (split.group("stem"), split.group("parts"))]
    projectors = [file for file in repo.files if file.name.rsplit("/", 1)[-1].startswith("mmproj")
                  and file.name.endswith(".gguf")]
    # The smallest projector: a picture's encoder is a small share of the model, and any precision of it works.
    extra = [min(projectors, key=lambda file: file.size)] if projectors else []
    return Plan(repo.repo_id, repo.revision, chosen.name, tuple(parts + extra))


def folder_plan(repo: Repository) -> Plan:
    """The whole model folder as transformers and vLLM load it: safetensors weights, configs, tokenizer, model card
    and licence, with no weights in other formats."""
    if not repo.has_safetensors_folder:
        raise HubUnavailable(f"{repo.repo_id} has no safetensors model folder (config.json and *.safetensors at its "
                             "top): pick one of its GGUF files, or another repository.")
    files = [file for file in repo.files
             if not file.name.endswith(_OTHER_WEIGHTS) and not file.name.startswith(_OTHER_FORMAT_FOLDERS)
             and not file.name.startswith(".")]
    return Plan(repo.repo_id, repo.revision, "", tuple(files))


# ----- the local cache ------------------------------------------------------------------------------------------

def repo_folder(repo_id: str, cache: Path | None = None) -> Path:
    """Where huggingface_hub keeps a model repository in its cache."""
    return (cache or hf_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def snapshot_path(plan: Plan, cache: Path | None = None) -> Path:
    """What the model picker loads once `plan` is fetched: the GGUF file, or the snapshot folder."""
    snapshot = repo_folder(plan.repo_id, cache) / "snapshots" / plan.revision
    return snapshot / plan.main if plan.main else snapshot


def present_bytes(plan: Plan, cache: Path | None = None) -> int:
    """How much of `plan` is already on disk: whole blobs, and the partial ones a resumed download continues."""
    blobs = repo_folder(plan.repo_id, cache) / "blobs"
    total = 0
    for file in plan.files:
        if not file.etag:
            continue
        for candidate in (blobs / file.etag, blobs / f"{file.etag}.incomplete"):
            try:
                total += min(candidate.stat().st_size, file.size)
                break
            except OSError:
                continue
    return total


def check_space(plan: Plan, cache: Path | None = None) -> None:
    """Refuses a download the cache's disk cannot hold (with SPACE_MARGIN to spare), before it starts."""
    cache = cache or hf_cache_dir()
    needed = plan.total_bytes - present_bytes(plan, cache)
    free = shutil.disk_usage(_existing(cache)).free
    if needed + SPACE_MARGIN > free:
        raise NotEnoughSpace(
            f"{plan.label} needs {describe_bytes(needed)} more on the disk of {cache}, which has "
            f"{describe_bytes(free)} free (and {describe_bytes(SPACE_MARGIN)} is kept spare). Delete models you no "
            "longer use, or point HF_HUB_CACHE at a larger disk.")


def is_in_cache(path: Path, cache: Path | None = None) -> bool:
    """Whether `path` is a snapshot file or folder of the Hugging Face cache (what the library may delete)."""
    return _cache_place(path, cache) is not None


def _cache_place(path: Path, cache: Path | None) -> tuple[Path, Path, Path] | None:
    """(the repository's folder, the snapshot, the path itself) with every `..` and folder link resolved (the
    path's own last link is kept: it is the snapshot's link, not its blob), or None outside a snapshot."""
    root = (cache or hf_cache_dir()).resolve()
    try:
        where = path.parent.resolve() / path.name if path.name not in ("", ".", "..") else path.resolve()
        parts = where.relative_to(root).parts
    except (OSError, ValueError):
        return None
    if len(parts) < 3 or not parts[0].startswith("models--") or parts[1] != "snapshots":
        return None
    return root / parts[0], root / parts[0] / "snapshots" / parts[2], where


def delete_from_cache(path: Path, cache: Path | None = None) -> int:
    """Deletes a fetched model from the Hugging Face cache and returns the bytes freed: a safetensors folder's
    files, or a GGUF file with the other parts of a split one (and the projector, when no other GGUF stays). When
    nothing else of the snapshot is left, huggingface_hub deletes the whole revision (its blobs, refs and entries of
    its shared blob store). Otherwise only these files' links go, and a blob of the repository's own that no other
    link uses. Refused outside the cache: LM Studio's and Ollama's models are deleted with those tools."""
    place = _cache_place(path, cache)
    if place is None:
        raise ValueError(f"{path} is not in the Hugging Face cache ({cache or hf_cache_dir()}): delete it with the "
                         "tool that put it there.")
    repo, snapshot, where = place
    links = [p for p in snapshot.rglob("*") if p.is_symlink() or p.is_file()]
    if where == snapshot:  # a folder model: its files, not the GGUF models that may share its snapshot
        doomed = [p for p in links if p.suffix != ".gguf"]
    else:
        doomed = [where, *_companions(where)]
    if set(links) <= set(doomed):
        return _delete_revision(repo, snapshot)
    blobs = {blob for blob in map(_own_blob, doomed) if blob is not None}
    for link in doomed:
        link.unlink(missing_ok=True)
    still_used = {_own_blob(link) for link in snapshot.parent.rglob("*") if link.is_symlink()}
    freed = 0
    for blob in blobs - still_used:
        try:
            # A link into the cache's shared store frees nothing by itself; huggingface_hub's own cleanup
            # (`hf cache prune`) takes store entries no repository links to any more.
            freed += 0 if blob.is_symlink() else blob.stat().st_size
            blob.unlink()
        except OSError:
            continue
    return freed


def _delete_revision(repo: Path, snapshot: Path) -> int:
    from huggingface_hub import scan_cache_dir

    cache = scan_cache_dir(repo.parent)
    strategy = cache.delete_revisions(snapshot.name)
    freed = int(strategy.expected_freed_size)
    strategy.execute()
    if repo.is_dir() and not any((repo / "snapshots").glob("*")):
        shutil.rmtree(repo, ignore_errors=True)  # refs and locks of a repository with no revision left
    return freed


def _companions(file: Path) -> list[Path]:
    """The other parts of a split GGUF, and the projector when no other model of the snapshot stays."""
    split = _SPLIT_GGUF.match(file.name)
    siblings = [p for p in file.parent.iterdir() if p != file]
    found = []
    if split:
        for sibling in siblings:
            other = _SPLIT_GGUF.match(sibling.name)
            if other and (other.group("stem"), other.group("parts")) == (split.group("stem"), split.group("parts")):
                found.append(sibling)
    others = [p for p in siblings if p.suffix == ".gguf" and not p.name.startswith("mmproj") and p not in found]
    if not others:
        found += [p for p in siblings if p.name.startswith("mmproj") and p.suffix == ".gguf"]
    return found


def _own_blob(link: Path) -> Path | None:
    """The blob a snapshot link points to, when it is one of its repository's (`../../blobs/<etag>`): its target
    is read one level only, never followed on, so nothing outside the repository's blobs is ever named."""
    if not link.is_symlink():
        return None
    target = Path(os.path.normpath(link.parent / os.readlink(link)))
    repo = link.parent
    while repo.parent.name != "snapshots" and repo != repo.parent:
        repo = repo.parent
    blobs = repo.parent.parent / "blobs"  # snapshots/<rev>/... -> the repository's blobs
    return target if target.parent == blobs else None


def _existing(path: Path) -> Path:
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


# ----- what the Hub's answers mean ------------------------------------------------------------------------------

def _strings(values: Any) -> list[str]:
    return [value for value in values if isinstance(value, str)] if isinstance(values, list | tuple) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: Any) -> str | None:
    return value[:100] if isinstance(value, str) and value else None


def _gated(value: Any) -> str | None:
    return str(value)[:20] if value not in (None, False, "false", "False") else None


def _licence(card: dict[str, Any] | None, tags: Iterable[str] | None) -> str | None:
    licence = (card or {}).get("license")
    if isinstance(licence, str) and licence:
        name = (card or {}).get("license_name")
        return f"{licence} ({name})" if licence == "other" and isinstance(name, str) else licence[:100]
    for tag in tags or ():
        if tag.startswith("license:"):
            return tag.removeprefix("license:")
    return None


def _unavailable(exc: Exception, what: str) -> HubUnavailable:
    """huggingface_hub's errors, said for a user."""
    from huggingface_hub.errors import GatedRepoError, OfflineModeIsEnabled, RepositoryNotFoundError

    if isinstance(exc, GatedRepoError):
        return HubUnavailable(f"{what} is gated: accept its terms at {endpoint()}/{what} with your account, then "
                              "start the app with HF_TOKEN set to an access token of that account.")
    if isinstance(exc, RepositoryNotFoundError):
        return HubUnavailable(f"{endpoint()} has no model {what!r} (or it is private: set HF_TOKEN to see it).")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubUnavailable("huggingface_hub is in offline mode (HF_HUB_OFFLINE): unset it to fetch models.")
    return HubUnavailable(f"Could not reach {endpoint()} for {what!r}: {exc}")

