"""POST /v1/embeddings, OpenAI's shape, over the sentence-embedding model the server is given (DEMO_EMBEDDING_MODEL:
app/knowledge/embeddings.py), loaded at its first use. A server without one answers 404 and says how to add one.

Vectors come as floats or, as the openai SDK asks by default, base64 of little-endian float32. Text is taken, not
token ids: ids are one tokenizer's (langchain-openai sends tiktoken's unless told `check_embedding_ctx_length=False`),
and a text longer than the model reads is refused rather than cut without a word.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Literal

import anyio
import anyio.to_thread
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from app.frontends.api.api_errors import documented_errors
from app.frontends.api.chat_completions.chat_protocol import APIError
from app.frontends.api.lazy_open import LazyOpen
from app.knowledge.embeddings import Embedder, EmbeddingError, EmbeddingRefused, configured_embedder

MAX_INPUTS = 2048  # as OpenAI's API
_WORKERS = 2  # threads embedding at once (the model takes one batch at a time; the other checks the next request)
_QUEUE = 32  # requests waiting for them, past which a 429
_MAX_CHARS_PER_TOKEN = 40


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(max_length=200)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = Field(None, max_length=512)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # a str: base64 (openai.types says list[float], the SDK decodes it to one)


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(BaseModel):
    """openai.types.CreateEmbeddingResponse, with room for base64 vectors."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class EmbeddingsEndpoint:
    """/v1/embeddings over `open_embedder()` (None: the server has no embedding model). The work runs on threads
    of its own (`_WORKERS`), so requests queued for the model wait in the event loop, not in the thread pool that
    chat and the other endpoints share; past `_QUEUE` waiting, a request is told to come back (429)."""

    def __init__(self, open_embedder: Callable[[], Embedder | None] | None = None) -> None:
        self._embedder = LazyOpen(open_embedder or configured_embedder, _unavailable, (EmbeddingError,))
        self._workers = anyio.CapacityLimiter(_WORKERS)
        self._waiting = 0

    def register(self, app: FastAPI) -> None:
        app.post("/v1/embeddings", response_model=EmbeddingList,
                 responses=documented_errors(400, 401, 404, 413, 422, 429, 503))(self.create)

    async def create(self, body: EmbeddingsRequest) -> EmbeddingList:
        texts = _texts(body.input)  # what is wrong with the request itself, before any model is asked
        if self._waiting >= _QUEUE:
            raise APIError(429, f"{self._waiting} embedding requests are waiting for the model; try again shortly.",
                           kind="rate_limit_error", code="rate_limit_exceeded")
        self._waiting += 1
        try:
            return await anyio.to_thread.run_sync(self._answer, body, texts, limiter=self._workers)
        finally:
            self._waiting -= 1

    def _answer(self, body: EmbeddingsRequest, texts: list[str]) -> EmbeddingList:
        embedder = self._embedder.get()
        if embedder is None:
            raise APIError(404, "This server has no embedding model: start it with DEMO_EMBEDDING_MODEL set to a "
                                "sentence-embedding model's folder (or a Hub id in the Hugging Face cache).",
                           param="model", code="model_not_found")
        if body.model != embedder.name:
            raise APIError(404, f"The model {body.model!r} does not exist here; this server embeds with "
                                f"{embedder.name!r}.", param="model", code="model_not_found")
        known = embedder.dimensions
        if body.dimensions is not None and known is not None and body.dimensions != known:
            raise APIError(400, f"{embedder.name} gives vectors of {known} dimensions; leave out dimensions or send "
                                f"{known}.", param="dimensions")
        limit = embedder.max_tokens
        if limit is not None:
            for index, text in enumerate(texts):  # a token is rarely this long: past it, no need to count
                if len(text) > limit * _MAX_CHARS_PER_TOKEN:
                    raise APIError(400, f"input[{index}] is {len(text):,} characters, longer than {embedder.name} "
                                        f"reads ({limit} tokens): split it.", param="input")
            for index, count in enumerate(embedder.token_counts(texts) or ()):
                if count > limit:
                    raise APIError(400, f"input[{index}] is more than {limit} tokens, the most {embedder.name} "
                                        "reads: split it.", param="input")
                if count == 0:
                    raise APIError(400, f"input[{index}] has nothing {embedder.name} reads.", param="input")
        try:
            embedded = embedder.embed(texts)
        except EmbeddingRefused as exc:
            raise APIError(400, str(exc), param="input") from exc
        except EmbeddingError as exc:
            raise APIError(503, str(exc), kind="service_unavailable") from exc
        size = len(embedded.vectors[0]) if embedded.vectors else 0
        if body.dimensions is not None and body.dimensions != size:
            raise APIError(400, f"{embedder.name} gives vectors of {size} dimensions; leave out dimensions or send "
                                f"{size}.", param="dimensions")
        return EmbeddingList(model=embedder.name, usage=Usage(prompt_tokens=embedded.tokens,
                                                              total_tokens=embedded.tokens),
                             data=[Embedding(index=index, embedding=_encoded(vector, body.encoding_format))
                                   for index, vector in enumerate(embedded.vectors)])


def _texts(given: str | list[str] | list[int] | list[list[int]]) -> list[str]:
    texts = [given] if isinstance(given, str) else given
    if not texts:
        raise APIError(400, "input is empty: send a text or a list of texts.", param="input")
    if not all(isinstance(text, str) for text in texts):
        raise APIError(400, "input must be text: token ids belong to one tokenizer, not this model's (with "
                            "langchain-openai, set check_embedding_ctx_length=False).", param="input")
    if len(texts) > MAX_INPUTS:
        raise APIError(400, f"input has {len(texts)} texts; send at most {MAX_INPUTS} per request.", param="input")
    for index, text in enumerate(texts):
        if not str(text).strip():
            raise APIError(400, f"input[{index}] is empty.", param="input")
        try:
            str(text).encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: valid JSON, no text
            raise APIError(400, f"input[{index}] is not valid Unicode text ({exc.reason}).", param="input") from exc
    return [str(text) for text in texts]


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _unavailable(exc: Exception) -> str:
    return f"The embedding model could not be loaded: {exc}"
