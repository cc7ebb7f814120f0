"""ApiFileStore: files uploaded through the API's /v1/files (tables api_files), and which of them went into which
vector store through /v1/vector_stores and what came of it (api_vector_store_files). A vector store is a knowledge
collection (app/storage/knowledge.py): the app's pages, its MCP tool and the API search the same documents. The
file's passages live with its document there; this store keeps the bytes as uploaded, which the API returns.

Each method takes the owner first and only touches that owner's rows; another owner's file behaves exactly like a
missing one.
"""

from __future__ import annotations

import builtins
import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.storage.database import rowcount
from app.storage.knowledge import KnowledgeLimits, KnowledgeRefused, lock_owner, printable
from app.storage.sessions import EngineStore
from app.storage.tables import ApiFileRow as F
from app.storage.tables import KnowledgeDocumentRow as D
from app.storage.tables import VectorStoreFileRow as V

MAX_FILENAME = 300
MAX_PURPOSE = 40


class VectorStoreGone(LookupError):
    """The vector store or the file went while the file was being read into it."""


@dataclass(frozen=True)
class ApiFile:
    id: str
    filename: str
    purpose: str
    size_bytes: int
    sha256: str
    created_at: datetime


@dataclass(frozen=True)
class VectorStoreFile:
    """A file in a vector store: "completed" with the document it was read into, or "failed" with why."""

    collection_id: str
    file_id: str
    document_id: str | None
    status: str
    error_code: str
    error_message: str
    created_at: datetime
    size_bytes: int  # the file's


class ApiFileStore(EngineStore):
    """Thread-safe; database failures raise StorageError."""

    def save(self, owner: str, filename: str, purpose: str, data: bytes,
             limits: KnowledgeLimits | None = None) -> ApiFile:
        """Keeps the file; KnowledgeRefused past the owner's limits (as many files as documents, and as many bytes,
        as knowledge allows one user), checked with the owner's other uploads held off."""
        limits = limits or KnowledgeLimits()
        name = (printable(filename) or "file")[:MAX_FILENAME]
        row = F(id=f"file-{secrets.token_hex(12)}", owner=owner, filename=name, purpose=purpose[:MAX_PURPOSE],
                size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), created_at=datetime.now(UTC),
                data=data)
        with self._writing() as session:
            lock_owner(session, owner)
            count, size = session.execute(select(func.count(), func.coalesce(func.sum(F.size_bytes), 0))
                                          .where(F.owner == owner)).one()
            if count + 1 > limits.documents:
                raise KnowledgeRefused(f"You keep {count:,} files here, the most allowed "
                                       "(DEMO_KNOWLEDGE_MAX_DOCUMENTS): delete some first.")
            if int(size) + len(data) > limits.megabytes * 2**20:
                raise KnowledgeRefused(f"Your files here take {int(size) / 2**20:,.1f} MB; with this one they would "
                                       f"pass the {limits.megabytes:,} MB allowed (DEMO_KNOWLEDGE_MAX_MB): delete "
                                       "some first.")
            session.add(row)
        return _file(row)

    def files(self, owner: str, purpose: str | None = None, newest_first: bool = True, after: str | None = None,
              limit: int = 10_000) -> builtins.list[ApiFile]:
        """The owner's files (without their bytes), newest first unless asked otherwise; `after`: those that come
        after this file id in that order (a page's cursor)."""
        columns = (F.id, F.filename, F.purpose, F.size_bytes, F.sha256, F.created_at)
        order = (F.created_at.desc(), F.id.desc()) if newest_first else (F.created_at, F.id)
        query = select(*columns).where(F.owner == owner)
        if purpose:
            query = query.where(F.purpose == purpose)
        with self._reading() as session:
            if after:
                cursor = session.execute(select(F.created_at, F.id).where(F.owner == owner, F.id == after)).first()
                if cursor is None:
                    return []
                at, id = cursor
                query = query.where((F.created_at < at) | ((F.created_at == at) & (F.id < id)) if newest_first
                                    else (F.created_at > at) | ((F.created_at == at) & (F.id > id)))
            rows = session.execute(query.order_by(*order).limit(max(1, min(limit, 10_001)))).all()
        return [ApiFile(*row) for row in rows]

    def get(self, owner: str, file_id: str) -> ApiFile | None:
        found = self.files_by_id(owner, [file_id])
        return found.get(file_id)

    def files_by_id(self, owner: str, file_ids: Sequence[str]) -> dict[str, ApiFile]:
        with self._reading() as session:
            rows = session.execute(select(F.id, F.filename, F.purpose, F.size_bytes, F.sha256, F.created_at)
                                   .where(F.owner == owner, F.id.in_(list(file_ids)))).all()
        return {row[0]: ApiFile(*row) for row in rows}

    def content(self, owner: str, file_id: str) -> bytes | None:
        with self._reading() as session:
            return session.scalar(select(F.data).where(F.owner == owner, F.id == file_id))

    def delete(self, owner: str, file_id: str) -> builtins.list[str] | None:
        """Deletes the file and its places in vector stores. Returns the documents to delete with it (those read
        from it that no other file of the same bytes uses; the caller deletes them), None if there was no file."""
        with self._writing() as session:
            places = session.scalars(select(V.collection_id).where(V.owner == owner, V.file_id == file_id)).all()
            orphans = [document for collection in places
                       if (document := _release(session, owner, collection, file_id)) is not None]
            if not rowcount(session.execute(delete(F).where(F.owner == owner, F.id == file_id))):
                return None
        return orphans

    # ----- in vector stores --------------------------------------------------------------------------------------

    def record(self, owner: str, collection_id: str, file_id: str, document_id: str | None, owns_document: bool,
               error_code: str = "", error_message: str = "") -> VectorStoreFile:
        """What came of adding the file to the collection: its document (`owns_document`: read from this file, not
        one that was there already), or the error. Replaces an earlier record of the same file there (added again
        after it failed). VectorStoreGone when the collection or the file went meanwhile."""
        now = datetime.now(UTC)
        with self._writing() as session:
            before = session.execute(select(V.document_id, V.owns_document).where(
                V.owner == owner, V.collection_id == collection_id, V.file_id == file_id)).first()
            # The same file added again (twice at once, say): it keeps the document it read.
            owns_document = owns_document or bool(before and before.owns_document and before.document_id ==
                                                  document_id)
            session.execute(delete(V).where(V.owner == owner, V.collection_id == collection_id, V.file_id == file_id))
            session.add(V(collection_id=collection_id, file_id=file_id, owner=owner, document_id=document_id,
                          owns_document=owns_document and document_id is not None,
                          status="failed" if error_code else "completed", error_code=error_code,
                          error_message=error_message[:2000], created_at=now))
            try:
                session.flush()
            except IntegrityError as exc:  # the collection, the file or the document went meanwhile
                raise VectorStoreGone("The vector store or the file was deleted meanwhile.") from exc
        found = self.in_vector_store(owner, collection_id, file_id)
        assert found is not None
        return found

    def vector_store_files(self, owner: str, collection_ids: Sequence[str]) -> builtins.list[VectorStoreFile]:
        """The files added to these collections, oldest first."""
        with self._reading() as session:
            rows = session.execute(
                select(V.collection_id, V.file_id, V.document_id, V.status, V.error_code, V.error_message,
                       V.created_at, F.size_bytes)
                .join(F, F.id == V.file_id).where(V.owner == owner, V.collection_id.in_(list(collection_ids)))
                .order_by(V.created_at, V.file_id)).all()
        return [VectorStoreFile(*row) for row in rows]

    def in_vector_store(self, owner: str, collection_id: str, file_id: str) -> VectorStoreFile | None:
        return next((found for found in self.vector_store_files(owner, [collection_id]) if found.file_id == file_id),
                    None)

    def file_ids_of(self, owner: str, document_ids: Sequence[str]) -> dict[str, str]:
        """The API file each of these documents was read from (documents added on the Knowledge page have none)."""
        with self._reading() as session:
            rows = session.execute(select(V.document_id, V.file_id).where(
                V.owner == owner, V.document_id.in_(list(document_ids)))).all()
        return {document: file for document, file in rows if document}

    def usage_bytes(self, owner: str, collection_ids: Sequence[str]) -> dict[str, int]:
        """Each collection's documents' bytes as uploaded."""
        with self._reading() as session:
            rows = session.execute(select(D.collection_id, D.size_bytes).where(
                D.owner == owner, D.collection_id.in_(list(collection_ids)))).all()
        totals = dict.fromkeys(collection_ids, 0)
        for collection, size in rows:
            totals[collection] += int(size)
        return totals

    def release(self, owner: str, collection_id: str, file_id: str) -> str | None:
        """Takes the file out of the collection. Returns its document if the caller is to delete it: read from this
        file, and used by no other file of the same bytes there (one that is takes it over). A document that was
        in the collection before (added on the Knowledge page) is never returned."""
        with self._writing() as session:
            return _release(session, owner, collection_id, file_id)


def _release(session: Session, owner: str, collection_id: str, file_id: str) -> str | None:
    row = session.execute(select(V.document_id, V.owns_document).where(
        V.owner == owner, V.collection_id == collection_id, V.file_id == file_id)).first()
    session.execute(delete(V).where(V.owner == owner, V.collection_id == collection_id, V.file_id == file_id))
    if row is None or row.document_id is None or not row.owns_document:
        return None
    heir = session.scalar(select(V.file_id).where(V.collection_id == collection_id, V.document_id == row.document_id)
                          .order_by(V.created_at, V.file_id).limit(1))
    if heir is None:
        return str(row.document_id)
    session.execute(update(V).where(V.collection_id == collection_id, V.file_id == heir).values(owns_document=True))
    return None


def _file(row: F) -> ApiFile:
    return ApiFile(row.id, row.filename, row.purpose, row.size_bytes, row.sha256, row.created_at)
