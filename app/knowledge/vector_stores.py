"""Vector stores and files as OpenAI's API has them (/v1/vector_stores, /v1/files), over the app's knowledge: a
vector store is a knowledge collection, and a file added to one is read into a document of it (ingest.py), so a
collection filled on the Knowledge page is searched through the API, and one filled through the API is chosen in
the Chat. UI-agnostic: the API server (app/frontends/api/knowledge/) is one front end of it.

Reading a file is done when `add_file` returns: the file is "completed" (searchable) or "failed", with OpenAI's
error code and a message that says why (a format it does not read, a damaged file, a limit), and the failure is
kept with the vector store, as OpenAI keeps it.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePath

from app.config import KnowledgeSettings
from app.knowledge.ingest import add_file
from app.knowledge.reading import READABLE_TYPES
from app.storage.api_files import ApiFile, ApiFileStore, VectorStoreFile
from app.storage.knowledge import Collection, KnowledgeRefused, KnowledgeStore
from app.tools.documents import DocumentError

# A document added on the Knowledge page has no API file: search results name it by this prefix and its id.
DOCUMENT_PREFIX = "document-"


class NotFound(LookupError):
    """No such vector store or file for this owner (another owner's is not revealed)."""


@dataclass(frozen=True)
class VectorStore:
    collection: Collection
    completed: int  # files read into it (through the API or on the Knowledge page)
    failed: int  # files added through the API that could not be read
    usage_bytes: int


@dataclass(frozen=True)
class SearchResult:
    file_id: str
    filename: str
    score: float  # the best result's is 1; the others relative to it
    location: str  # "page 212", "slide 3", a heading
    text: str


class VectorStores:
    def __init__(self, knowledge: KnowledgeStore, files: ApiFileStore, settings: KnowledgeSettings | None = None):
        self.knowledge, self.files = knowledge, files
        self.settings = settings or KnowledgeSettings.from_env()

    # ----- vector stores -----------------------------------------------------------------------------------------

    def create(self, owner: str, name: str | None, file_ids: Sequence[str] = ()) -> VectorStore:
        """A new collection (named uniquely: OpenAI's names need not be, the app's must, so a taken one gets a
        number), with these files read into it."""
        missing = [file_id for file_id in file_ids if self.files.get(owner, file_id) is None]
        if missing:
            raise NotFound(f"No such file: {missing[0]}.")
        base = (name or "").strip() or f"Vector store {datetime.now(UTC):%Y-%m-%d %H:%M:%S}"
        taken = {collection.name for collection in self.knowledge.collections(owner)}
        unique = next(candidate for candidate in (base if n == 1 else f"{base} ({n})" for n in range(1, 10_000))
                      if candidate not in taken)
        collection = self.knowledge.create_collection(owner, unique)
        for file_id in dict.fromkeys(file_ids):
            self.add_file(owner, collection.id, file_id)
        return self.get(owner, collection.id)

    def list(self, owner: str) -> builtins.list[VectorStore]:
        """Newest first."""
        collections = sorted(self.knowledge.collections(owner), key=lambda c: (c.created_at, c.id), reverse=True)
        return self._described(owner, collections)

    def get(self, owner: str, vector_store_id: str) -> VectorStore:
        collection = self.knowledge.collection(owner, vector_store_id)
        if collection is None:
            raise NotFound(f"No such vector store: {vector_store_id}.")
        return self._described(owner, [collection])[0]

    def rename(self, owner: str, vector_store_id: str, name: str) -> VectorStore:
        self.get(owner, vector_store_id)
        self.knowledge.rename_collection(owner, vector_store_id, name)
        return self.get(owner, vector_store_id)

    def delete(self, owner: str, vector_store_id: str) -> bool:
        """The collection with its documents; the files stay (as OpenAI's do)."""
        return self.knowledge.delete_collection(owner, vector_store_id)

    def _described(self, owner: str, collections: builtins.list[Collection]) -> builtins.list[VectorStore]:
        ids = [collection.id for collection in collections]
        failed: dict[str, int] = dict.fromkeys(ids, 0)
        for added in self.files.vector_store_files(owner, ids):
            failed[added.collection_id] += added.status == "failed"
        usage = self.files.usage_bytes(owner, ids)
        return [VectorStore(collection, collection.documents, failed[collection.id], usage[collection.id])
                for collection in collections]

    # ----- files in them -----------------------------------------------------------------------------------------

    def add_file(self, owner: str, vector_store_id: str, file_id: str) -> VectorStoreFile:
        """Reads the file into the vector store's collection. A file it cannot read is recorded as failed, with
        why; the same bytes in the collection already are not read twice."""
        self.get(owner, vector_store_id)
        file = self.files.get(owner, file_id)
        data = self.files.content(owner, file_id)
        if file is None or data is None:
            raise NotFound(f"No such file: {file_id}.")
        suffix = PurePath(file.filename).suffix.lower().lstrip(".")
        if suffix not in READABLE_TYPES:
            return self.files.record(owner, vector_store_id, file_id, None, "unsupported_file",
                                     f"{file.filename}: files of type {suffix or '(none)'!r} are not read; "
                                     f"these are: {', '.join(READABLE_TYPES)}.")
        known = self.knowledge.find_document(owner, vector_store_id, file.sha256)
        if known is not None:
            return self.files.record(owner, vector_store_id, file_id, known.id)
        try:
            document = add_file(self.knowledge, owner, vector_store_id, file.filename, data, self.settings)
        except (DocumentError, KnowledgeRefused) as exc:
            return self.files.record(owner, vector_store_id, file_id, None, "invalid_file", str(exc))
        return self.files.record(owner, vector_store_id, file_id, document.id)

    def vector_store_files(self, owner: str, vector_store_id: str) -> builtins.list[VectorStoreFile]:
        self.get(owner, vector_store_id)
        return self.files.vector_store_files(owner, [vector_store_id])

    def vector_store_file(self, owner: str, vector_store_id: str, file_id: str) -> VectorStoreFile:
        found = self.files.in_vector_store(owner, vector_store_id, file_id)
        if found is None:
            raise NotFound(f"No file {file_id} in vector store {vector_store_id}.")
        return found

    def remove_file(self, owner: str, vector_store_id: str, file_id: str) -> bool:
        """The file's document goes from the collection (unless another file of the same bytes is there too); the
        file stays."""
        found = self.vector_store_file(owner, vector_store_id, file_id)
        others = [added for added in self.files.vector_store_files(owner, [vector_store_id])
                  if added.document_id == found.document_id and added.file_id != file_id]
        removed = self.files.forget(owner, vector_store_id, file_id)
        if found.document_id and not others:
            self.knowledge.delete_document(owner, found.document_id)
        return removed

    def delete_file(self, owner: str, file_id: str) -> bool:
        """The file, and the documents read from it in every vector store."""
        if self.files.get(owner, file_id) is None:
            return False
        for document_id in self.files.documents_of(owner, file_id):
            self.knowledge.delete_document(owner, document_id)
        return self.files.delete(owner, file_id)

    def save_file(self, owner: str, filename: str, purpose: str, data: bytes) -> ApiFile:
        if len(data) > self.settings.max_file_mb * 2**20:
            raise KnowledgeRefused(f"{filename} is {len(data) / 2**20:,.1f} MB; files up to "
                                   f"{self.settings.max_file_mb:,} MB are taken (DEMO_KNOWLEDGE_MAX_FILE_MB).")
        return self.files.save(owner, PurePath(filename).name, purpose, data)

    # ----- search ------------------------------------------------------------------------------------------------

    def search(self, owner: str, vector_store_ids: Sequence[str], query: str, limit: int) -> builtins.list[
            SearchResult]:
        for vector_store_id in vector_store_ids:
            self.get(owner, vector_store_id)
        hits = self.knowledge.search(owner, list(vector_store_ids), query, limit)
        file_ids = self.files.file_ids_of(owner, [hit.document_id for hit in hits])
        best = max((hit.score for hit in hits), default=0.0) or 1.0
        return [SearchResult(file_ids.get(hit.document_id, DOCUMENT_PREFIX + hit.document_id), hit.document_name,
                             round(max(hit.score, 0.0) / best, 4), hit.location, hit.text) for hit in hits]
