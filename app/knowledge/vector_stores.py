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
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePath

from app.config import KnowledgeSettings
from app.knowledge.embeddings import Embedder, configured_embedder
from app.knowledge.ingest import add_file
from app.knowledge.reading import READABLE_TYPES
from app.knowledge.retrieval import Retrieval
from app.storage.api_files import ApiFile, ApiFileStore, VectorStoreFile, VectorStoreGone
from app.storage.errors import StorageError
from app.storage.knowledge import MAX_NAME, Collection, KnowledgeLimits, KnowledgeRefused, KnowledgeStore, printable
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
    """One per process: it holds off a second reading of the same bytes into the same collection while the first
    is under way (the second then maps to the first's document)."""

    def __init__(self, knowledge: KnowledgeStore, files: ApiFileStore, settings: KnowledgeSettings | None = None,
                 embedder: Callable[[], Embedder | None] = configured_embedder):
        self.knowledge, self.files = knowledge, files
        self.retrieval = Retrieval(knowledge, embedder)
        self.settings = settings or KnowledgeSettings.from_env()
        self._reading: dict[tuple[str, str], threading.Lock] = {}
        self._reading_guard = threading.Lock()

    # ----- vector stores -----------------------------------------------------------------------------------------

    def create(self, owner: str, name: str | None, file_ids: Sequence[str] = ()) -> VectorStore:
        """A new collection (named uniquely: OpenAI's names need not be, the app's must, so a taken one gets a
        number), with these files read into it."""
        missing = [file_id for file_id in file_ids if self.files.get(owner, file_id) is None]
        if missing:
            raise NotFound(f"No such file: {missing[0]}.")
        base = printable(name or "")[:MAX_NAME - 8] or f"Vector store {datetime.now(UTC):%Y-%m-%d %H:%M:%S}"
        for _ in range(3):  # another request may take the free name first: the next one then
            taken = {collection.name for collection in self.knowledge.collections(owner)}
            unique = next(candidate for candidate in (base if n == 1 else f"{base} ({n})" for n in range(1, 100_000))
                          if candidate not in taken)
            try:
                collection = self.knowledge.create_collection(owner, unique)
                break
            except KnowledgeRefused:
                continue
        else:
            raise KnowledgeRefused(f"No free name like {base!r} could be had; try another name.")
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
        why; the same bytes in the collection already are not read twice (the file maps to that document)."""
        self.get(owner, vector_store_id)
        file = self.files.get(owner, file_id)
        data = self.files.content(owner, file_id)
        if file is None or data is None:
            raise NotFound(f"No such file: {file_id}.")
        suffix = PurePath(file.filename).suffix.lower().lstrip(".")
        if suffix not in READABLE_TYPES:
            return self._record(owner, vector_store_id, file_id, None, "unsupported_file",
                                f"{file.filename}: files of type {suffix or '(none)'!r} are not read; these are: "
                                f"{', '.join(READABLE_TYPES)}.")
        with self._one_reading(vector_store_id, file.sha256):
            known = self.knowledge.find_document(owner, vector_store_id, file.sha256)
            if known is not None:
                return self._record(owner, vector_store_id, file_id, known.id)
            try:
                document = add_file(self.knowledge, owner, vector_store_id, file.filename, data, self.settings,
                                    keep_file=False)  # re-read from the /v1/files file: not stored twice
            except (DocumentError, KnowledgeRefused) as exc:
                known = self.knowledge.find_document(owner, vector_store_id, file.sha256)
                if known is not None:  # read by another server process meanwhile
                    return self._record(owner, vector_store_id, file_id, known.id)
                return self._record(owner, vector_store_id, file_id, None, "invalid_file", str(exc))
            except StorageError:
                if self.knowledge.collection(owner, vector_store_id) is None:  # deleted while the file was read
                    raise NotFound(f"The vector store {vector_store_id} was deleted meanwhile.") from None
                raise
            try:
                return self.files.record(owner, vector_store_id, file_id, document.id, owns_document=True)
            except VectorStoreGone:  # the file or the store went while it was read: so does what was read
                self.knowledge.delete_document(owner, document.id)
                raise NotFound(f"The file {file_id} or the vector store {vector_store_id} was deleted "
                               "meanwhile.") from None

    def _record(self, owner: str, vector_store_id: str, file_id: str, document_id: str | None,
                error_code: str = "", error_message: str = "") -> VectorStoreFile:
        try:
            return self.files.record(owner, vector_store_id, file_id, document_id, False, error_code, error_message)
        except VectorStoreGone:
            raise NotFound(f"The file {file_id} or the vector store {vector_store_id} was deleted meanwhile.") \
                from None

    @contextmanager
    def _one_reading(self, collection_id: str, sha256: str) -> Iterator[None]:
        with self._reading_guard:
            lock = self._reading.setdefault((collection_id, sha256), threading.Lock())
        with lock:
            try:
                yield
            finally:
                with self._reading_guard:
                    self._reading.pop((collection_id, sha256), None)

    def vector_store_files(self, owner: str, vector_store_id: str) -> builtins.list[VectorStoreFile]:
        self.get(owner, vector_store_id)
        return self.files.vector_store_files(owner, [vector_store_id])

    def vector_store_file(self, owner: str, vector_store_id: str, file_id: str) -> VectorStoreFile:
        found = self.files.in_vector_store(owner, vector_store_id, file_id)
        if found is None:
            raise NotFound(f"No file {file_id} in vector store {vector_store_id}.")
        return found

    def remove_file(self, owner: str, vector_store_id: str, file_id: str) -> None:
        """Takes the file out of the vector store, and the document read from it, unless another file of the same
        bytes there uses it too or it was there before (added on the Knowledge page); the file stays."""
        self.vector_store_file(owner, vector_store_id, file_id)
        orphan = self.files.release(owner, vector_store_id, file_id)
        if orphan is not None:
            self.knowledge.delete_document(owner, orphan)

    def delete_file(self, owner: str, file_id: str) -> bool:
        """The file, and the documents read from it, as remove_file takes them; False if there was no file."""
        orphans = self.files.delete(owner, file_id)
        for document_id in orphans or []:
            self.knowledge.delete_document(owner, document_id)
        return orphans is not None

    def save_file(self, owner: str, filename: str, purpose: str, data: bytes) -> ApiFile:
        if len(data) > self.settings.max_file_mb * 2**20:
            raise KnowledgeRefused(f"{filename} is {len(data) / 2**20:,.1f} MB; files up to "
                                   f"{self.settings.max_file_mb:,} MB are taken (DEMO_KNOWLEDGE_MAX_FILE_MB).")
        limits = KnowledgeLimits(self.settings.max_documents, self.settings.max_passages, self.settings.max_mb)
        return self.files.save(owner, PurePath(filename).name, purpose, data, limits)

    # ----- search ------------------------------------------------------------------------------------------------

    def search(self, owner: str, vector_store_ids: Sequence[str], query: str, limit: int) -> builtins.list[
            SearchResult]:
        for vector_store_id in vector_store_ids:
            self.get(owner, vector_store_id)
        hits = self.retrieval.search(owner, list(vector_store_ids), query, limit)
        file_ids = self.files.file_ids_of(owner, [hit.document_id for hit in hits])
        best = max((hit.score for hit in hits), default=0.0) or 1.0
        return [SearchResult(file_ids.get(hit.document_id, DOCUMENT_PREFIX + hit.document_id), hit.document_name,
                             round(max(hit.score, 0.0) / best, 4), hit.location, hit.text) for hit in hits]
