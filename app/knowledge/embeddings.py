"""Sentence embeddings: texts as unit-length vectors whose dot product says how close their meanings are. Either a
local sentence-embedding model (a folder on this machine, read by sentence-transformers, which applies the model's
own pooling, normalization and query/document prompts), or any server that speaks OpenAI's /v1/embeddings.

Nothing here downloads: a local model is a folder (the model library fetches one where the network is allowed), and
a remote one is a URL the user gave. UI-agnostic: the API server's /v1/embeddings is one front end of it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from app.clients.transformers_loading import transformers_loading

log = logging.getLogger(__name__)
Kind = Literal["query", "document"]  # a question searched for, or a passage searched in (some models tell them apart)
_BATCH = 32


class EmbeddingError(RuntimeError):
    """An embedding model that cannot be loaded or reached, or that failed; the message says why (and names no
    path of the server's)."""


class EmbeddingRefused(EmbeddingError):
    """A remote embedding server refused these texts (a 4xx): the texts' fault, not the server's."""


@dataclass(frozen=True)
class Embedded:
    vectors: list[list[float]]  # one per text, unit length
    tokens: int  # the tokens the model read, for usage figures


class Embedder(Protocol):
    name: str  # the model's name, as /v1/embeddings serves it
    key: str  # which model this is, for the vectors stored by it: its name and a fingerprint of what it is

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> Embedded: ...

    def token_counts(self, texts: Sequence[str]) -> list[int] | None: ...

    @property
    def max_tokens(self) -> int | None: ...  # the longest text it reads whole; None: the server says

    @property
    def dimensions(self) -> int | None: ...  # its vectors' size; None: known after the first answer


class LocalEmbedder:
    """A sentence-embedding model in a local folder, on the CPU (or `device`). One batch at a time, tokenizer and
    model under one lock (sentence-transformers sets the shared tokenizer's truncation while it encodes): torch
    already uses every core for one batch, and a second would only double the memory."""

    def __init__(self, folder: str | Path, device: str = "cpu", name: str | None = None) -> None:
        from sentence_transformers import SentenceTransformer

        path = Path(folder).expanduser()
        self.name = name or path.name
        if not path.is_dir():
            raise EmbeddingError(f"No embedding model folder named {self.name!r}: give the folder of a "
                                 "sentence-embedding model (for example one fetched on the Models page).")
        try:
            with transformers_loading():  # it loads through transformers' from_pretrained
                self._model = SentenceTransformer(str(path), device=device, local_files_only=True,
                                                  trust_remote_code=False)
        except Exception as exc:  # a damaged or foreign folder fails in many ways, all of them "not loadable"
            log.warning("Loading the embedding model at %s failed", path, exc_info=True)
            raise EmbeddingError(f"{self.name} could not be loaded as a sentence-embedding model "
                                 f"({type(exc).__name__}); the server's log has the details.") from exc
        self._lock = threading.RLock()
        self.key = f"{self.name[:150]}@{_fingerprint(path)}"

    @property
    def dimensions(self) -> int | None:
        return int(self._model.get_embedding_dimension() or 0) or None

    @property
    def max_tokens(self) -> int:
        return int(self._model.max_seq_length or 512)  # None: a model that names no limit

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the model reads of each text, special tokens included; one past max_tokens means "too
        long" (counting stops there, so a huge text costs no more than a long one)."""
        with self._lock:
            tokenizer = self._model.tokenizer
            encoded = tokenizer(list(texts), add_special_tokens=True, truncation=True,
                                max_length=self.max_tokens + 1, return_attention_mask=False,
                                return_token_type_ids=False)
            return [len(ids) for ids in encoded["input_ids"]]

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> Embedded:
        if not texts:
            return Embedded([], 0)
        with self._lock:
            try:
                encode = self._model.encode_query if kind == "query" else self._model.encode_document
                vectors = encode(list(texts), batch_size=_BATCH, normalize_embeddings=True, convert_to_numpy=True,
                                 show_progress_bar=False)
                tokens = sum(min(count, self.max_tokens) for count in self.token_counts(texts))
            except Exception as exc:  # the engine's failure is this request's, never the process's
                log.warning("Embedding %d texts failed", len(texts), exc_info=True)
                raise EmbeddingError(f"{self.name} failed to embed the texts ({type(exc).__name__}).") from exc
        return Embedded([[float(value) for value in row] for row in vectors], tokens)


class RemoteEmbedder:
    """A model behind an OpenAI-compatible /v1/embeddings (OpenAI, vLLM, llama-server, Ollama, this app's own API
    server), through the openai SDK. Its vectors are normalized here: not every server does."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 20.0) -> None:
        import openai

        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0)
        self.name = model
        self.key = f"{model[:150]}@{hashlib.sha256(base_url.encode()).hexdigest()[:12]}"
        self._dimensions: int | None = None
        self._down: tuple[float, EmbeddingError] | None = None  # when the server last failed, and how

    @property
    def max_tokens(self) -> None:
        return None  # the server's own limit: it refuses what is too long

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    def token_counts(self, texts: Sequence[str]) -> None:
        return None  # the server's tokenizer is its own

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> Embedded:

        down = self._down
        if down is not None and time.monotonic() - down[0] < _RETRY_AFTER_S:
            raise down[1]  # a server that just failed is not waited for again at every search
        try:
            embedded = self._embed(texts)
        except EmbeddingRefused:
            raise
        except EmbeddingError as exc:
            self._down = (time.monotonic(), exc)
            raise
        self._down = None
        return embedded

    def _embed(self, texts: Sequence[str]) -> Embedded:
        import openai

        vectors: list[list[float]] = []
        tokens = 0
        for start in range(0, len(texts), _BATCH):
            batch = list(texts[start:start + _BATCH])
            try:
                answer = self._client.embeddings.create(model=self.name, input=batch, encoding_format="float")
                ordered = sorted(answer.data, key=lambda item: int(item.index))
                got = [unit([float(value) for value in item.embedding]) for item in ordered]
                used = int(answer.usage.prompt_tokens) if answer.usage and answer.usage.prompt_tokens else 0
            except openai.APIStatusError as exc:
                if 400 <= exc.status_code < 500 and exc.status_code not in (401, 403, 404, 429):
                    raise EmbeddingRefused(f"The embedding server refused the texts: {exc.message}") from exc
                raise EmbeddingError(f"The embedding server answered {exc.status_code}: {exc.message}") from exc
            except openai.OpenAIError as exc:
                raise EmbeddingError(f"The embedding server could not be reached: {exc}") from exc
            except (TypeError, ValueError, AttributeError, KeyError) as exc:
                raise EmbeddingError(f"The embedding server's answer is not OpenAI's embeddings shape: {exc}") \
                    from exc
            if len(got) != len(batch) or len({len(vector) for vector in got}) > 1:
                raise EmbeddingError(f"The embedding server gave {len(got)} vectors for {len(batch)} texts, or "
                                     "vectors of different sizes.")
            vectors += got
            tokens += used
        if vectors:
            self._dimensions = len(vectors[0])
        return Embedded(vectors, tokens)


def unit(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to length 1 (a zero vector stays zero)."""
    length = math.sqrt(sum(value * value for value in vector))
    return [float(value) / length for value in vector] if length else [float(value) for value in vector]


def configured_embedder() -> Embedder | None:
    """The embedding model the environment names (see embedder_from_env), loaded once per process and setting:
    its weights are read-only, shared by every user's searches."""
    import os

    return _loaded(tuple(os.environ.get(name, "").strip() for name in _SETTINGS))


_SETTINGS = ("DEMO_EMBEDDING_MODEL", "DEMO_EMBEDDING_URL", "DEMO_EMBEDDING_API_KEY")


_RETRY_AFTER_S = 30.0  # a model that failed to load is tried again after this, not at every search
_failed: dict[tuple[str, ...], tuple[float, EmbeddingError]] = {}  # per setting: when, and why


def _loaded(settings: tuple[str, ...]) -> Embedder | None:
    failed = _failed.get(settings)
    if failed is not None and time.monotonic() - failed[0] < _RETRY_AFTER_S:
        raise failed[1]
    try:
        return _load(settings)
    except EmbeddingError as exc:
        _failed[settings] = (time.monotonic(), exc)
        raise


_loading = threading.Lock()  # one load at a time: two first searches at once load the model once


def _load(settings: tuple[str, ...]) -> Embedder | None:
    with _loading:
        return _load_once(settings)


@functools.lru_cache(maxsize=2)
def _load_once(settings: tuple[str, ...]) -> Embedder | None:
    return embedder_from_env(dict(zip(_SETTINGS, settings, strict=True)))


def _fingerprint(folder: Path) -> str:
    """Tells two models with the same name apart: their configuration and the size of their weights."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix in (".json", ".safetensors", ".bin"):
            digest.update(path.name.encode())
            digest.update(path.read_bytes() if path.suffix == ".json" and path.stat().st_size < 2**20
                          else str(path.stat().st_size).encode())
    return digest.hexdigest()[:12]


def embedder_from_env(environ: Any = None) -> Embedder | None:
    """The embedding model the settings name: DEMO_EMBEDDING_MODEL (a local folder, or a Hub id already in the
    Hugging Face cache), or DEMO_EMBEDDING_URL with DEMO_EMBEDDING_MODEL as the model's name there (and
    DEMO_EMBEDDING_API_KEY); None when neither is set."""
    import os

    env = os.environ if environ is None else environ
    model = env.get("DEMO_EMBEDDING_MODEL", "").strip()
    url = env.get("DEMO_EMBEDDING_URL", "").strip()
    if url:
        if not model:
            raise EmbeddingError("DEMO_EMBEDDING_URL needs DEMO_EMBEDDING_MODEL: the model's name on that server.")
        return RemoteEmbedder(url, model, env.get("DEMO_EMBEDDING_API_KEY") or None)
    if not model:
        return None
    folder = Path(model).expanduser()
    if folder.is_dir():
        return LocalEmbedder(folder)
    return LocalEmbedder(_cached(model), name=model)


def _cached(repo_id: str) -> Path:
    """A Hub model already in the Hugging Face cache (nothing is downloaded)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError) as exc:
        raise EmbeddingError(f"DEMO_EMBEDDING_MODEL={repo_id!r} is neither a folder nor a model in the Hugging Face "
                             "cache: fetch it on the Models page (with downloads allowed) or give its folder.") from exc
