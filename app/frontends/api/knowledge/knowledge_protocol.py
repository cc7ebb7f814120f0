"""Requests and answers of the Files and Vector stores endpoints, in OpenAI's shapes: the requests as pydantic
models, the answers built from `openai.types`, so that the openai SDK reads them unchanged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from openai.types import FileObject, VectorStore, VectorStoreSearchResponse
from openai.types.vector_stores import VectorStoreFile
from pydantic import BaseModel, ConfigDict, Field

from app.frontends.api.chat_completions.chat_protocol import APIError
from app.knowledge import vector_stores as core
from app.storage.api_files import ApiFile
from app.storage.api_files import VectorStoreFile as StoredFile

FilePurpose = Literal["assistants", "assistants_output", "batch", "batch_output", "fine-tune", "fine-tune-results",
                      "vision", "user_data"]
PASSAGE_SETTINGS = "DEMO_KNOWLEDGE_PASSAGE_CHARS and DEMO_KNOWLEDGE_OVERLAP_CHARS"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field this server does not know is refused, not ignored


class ChunkingStrategy(_Request):
    type: Literal["auto", "static"]
    static: dict[str, Any] | None = None


class VectorStoreCreate(_Request):
    name: str | None = Field(None, max_length=200)
    file_ids: list[str] = Field(default_factory=list, max_length=500)
    description: str | None = None
    metadata: dict[str, str] | None = None
    expires_after: dict[str, Any] | None = None
    chunking_strategy: ChunkingStrategy | None = None


class VectorStoreUpdate(_Request):
    name: str | None = Field(None, max_length=200)
    metadata: dict[str, str] | None = None
    expires_after: dict[str, Any] | None = None


class VectorStoreFileCreate(_Request):
    file_id: str = Field(max_length=100)
    attributes: dict[str, Any] | None = None
    chunking_strategy: ChunkingStrategy | None = None


class RankingOptions(_Request):
    ranker: Literal["auto", "default-2024-11-15", "none"] | None = None
    score_threshold: float | None = Field(None, ge=0, le=1)


class VectorStoreSearch(_Request):
    query: str | list[str] = Field(min_length=1)
    max_num_results: int = Field(10, ge=1, le=50)
    filters: dict[str, Any] | None = None
    ranking_options: RankingOptions | None = None
    rewrite_query: bool = False


def check_create(body: VectorStoreCreate | VectorStoreUpdate) -> None:
    """What a vector store here cannot do, refused with why rather than ignored."""
    if body.metadata:
        raise APIError(400, "Vector stores here keep no metadata: send none.", param="metadata")
    if body.expires_after:
        raise APIError(400, "Vector stores here do not expire: delete one when it is no longer needed.",
                       param="expires_after")
    if isinstance(body, VectorStoreCreate):
        if body.description:
            raise APIError(400, "Vector stores here keep no description: send none.", param="description")
        check_chunking(body.chunking_strategy)


def check_chunking(strategy: ChunkingStrategy | None) -> None:
    if strategy is not None and strategy.type != "auto":
        raise APIError(400, f"Files are cut into passages along their pages and headings, sized by the server's "
                            f"{PASSAGE_SETTINGS}: use chunking_strategy auto, or none.",
                       param="chunking_strategy")


def check_file(body: VectorStoreFileCreate) -> None:
    if body.attributes:
        raise APIError(400, "Files in a vector store here carry no attributes: send none.", param="attributes")
    check_chunking(body.chunking_strategy)


def check_search(body: VectorStoreSearch) -> str:
    """The query as one text."""
    if body.filters:
        raise APIError(400, "Searches here take no attribute filters (files carry no attributes).", param="filters")
    if body.rewrite_query:
        raise APIError(400, "Queries are not rewritten here: send rewrite_query false.", param="rewrite_query")
    query = " ".join(body.query) if isinstance(body.query, list) else body.query
    if not query.strip():
        raise APIError(400, "The query is empty.", param="query")
    if len(query) > 4000:
        raise APIError(400, "The query is longer than 4,000 characters.", param="query")
    return query


def file_object(file: ApiFile) -> FileObject:
    return FileObject(id=file.id, bytes=file.size_bytes, created_at=int(file.created_at.timestamp()),
                      filename=file.filename, object="file", purpose=file.purpose,  # type: ignore[arg-type]
                      status="processed")


def vector_store(found: core.VectorStore) -> VectorStore:
    collection = found.collection
    return VectorStore.model_validate({
        "id": collection.id, "object": "vector_store", "name": collection.name, "status": "completed",
        "created_at": int(collection.created_at.timestamp()),
        "last_active_at": int(collection.updated_at.timestamp()), "usage_bytes": found.usage_bytes,
        "file_counts": {"cancelled": 0, "completed": found.completed, "failed": found.failed, "in_progress": 0,
                        "total": found.completed + found.failed},
        "metadata": {}, "expires_after": None, "expires_at": None})


def vector_store_file(added: StoredFile) -> VectorStoreFile:
    return VectorStoreFile.model_validate({
        "id": added.file_id, "object": "vector_store.file", "vector_store_id": added.collection_id,
        "created_at": int(added.created_at.timestamp()), "status": added.status,
        "usage_bytes": added.size_bytes if added.status == "completed" else 0,
        "last_error": {"code": added.error_code, "message": added.error_message} if added.error_code else None,
        "attributes": {}, "chunking_strategy": {"type": "other"}})


def search_result(result: core.SearchResult) -> VectorStoreSearchResponse:
    return VectorStoreSearchResponse.model_validate({
        "file_id": result.file_id, "filename": result.filename, "score": result.score,
        "attributes": {"location": result.location}, "content": [{"type": "text", "text": result.text}]})


T = TypeVar("T")


def page(items: Sequence[T], id_of: Callable[[T], str], limit: int, after: str | None = None,
         before: str | None = None) -> dict[str, Any]:
    """One page of an ordered list, in OpenAI's list shape: the items after the `after` id (or before `before`)."""
    ids = [id_of(item) for item in items]
    start, end = 0, len(items)
    if after is not None:
        start = ids.index(after) + 1 if after in ids else len(items)
    if before is not None:
        end = ids.index(before) if before in ids else 0
    chosen = list(items[start:end])
    shown = chosen[-limit:] if before is not None and after is None else chosen[:limit]
    return {"object": "list", "data": shown, "first_id": id_of(shown[0]) if shown else None,
            "last_id": id_of(shown[-1]) if shown else None, "has_more": len(chosen) > len(shown)}
