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

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from app.frontends.api.api_errors import documented_errors
from app.frontends.api.chat_completions.chat_protocol import APIError
from app.frontends.api.lazy_open import LazyOpen
from app.knowledge.embeddings import Embedder, EmbeddingError, configured_embedder

MAX_INPUTS = 2048  # as OpenAI's API


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
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
    """/v1/embeddings over `open_embedder()` (None: the server has no embedding model)."""

    def __init__(self, open_embedder: Callable[[], Embedder | None] | None = None) -> None:
        self._embedder = LazyOpen(open_embedder or configured_embedder, _unavailable, (EmbeddingError,))

    def register(self, app: FastAPI) -> None:
        app.post("/v1/embeddings", response_model=EmbeddingList,
                 responses=documented_errors(400, 401, 404, 413, 422, 503))(self.create)

    async def create(self, body: EmbeddingsRequest) -> EmbeddingList:
        embedder = await run_in_threadpool(self._embedder.get)
        if embedder is None:
            raise APIError(404, "This server has no embedding model: start it with DEMO_EMBEDDING_MODEL set to a "
                                "sentence-embedding model's folder (or a Hub id in the Hugging Face cache).",
                           param="model", code="model_not_found")
        if body.model != embedder.name:
            raise APIError(404, f"The model {body.model!r} does not exist here; this server embeds with "
                                f"{embedder.name!r}.", param="model", code="model_not_found")
        texts = _texts(body.input)
        counts = await run_in_threadpool(embedder.token_counts, texts)
        for index, count in enumerate(counts):
            if count > embedder.max_tokens:
                raise APIError(400, f"input[{index}] is {count} tokens; {embedder.name} reads at most "
                                    f"{embedder.max_tokens}: split it.", param="input")
        try:
            embedded = await run_in_threadpool(embedder.embed, texts)
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
    return [str(text) for text in texts]


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _unavailable(exc: Exception) -> str:
    return f"The embedding model could not be loaded: {exc}"
