"""KnowledgeStore: users' documents as searchable passages (tables knowledge_collections, knowledge_documents,
knowledge_chunks), and full-text search over them in the database itself: SQLite's FTS5 (BM25) or PostgreSQL's
text search (ts_rank over the stored, GIN-indexed tsvector, divided by the log of the length: 93% recall@5 where
ts_rank_cd found 73%, bench/retrieval.py). Works offline, with no model.

Each method takes the owner first and only touches that owner's rows; another owner's collection behaves exactly
like a missing one. Per-user limits (documents, passages, bytes) are checked before a document is stored, in the
same transaction, so two uploads at once cannot both slip under them.
"""

from __future__ import annotations

import builtins
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, String, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.storage.database import rowcount
from app.storage.sessions import EngineStore
from app.storage.tables import KNOWLEDGE_FTS_TABLE, KNOWLEDGE_LANGUAGE, KNOWLEDGE_TSVECTOR_COLUMN
from app.storage.tables import ApiFileRow as A
from app.storage.tables import KnowledgeChunkRow as K
from app.storage.tables import KnowledgeCollectionRow as C
from app.storage.tables import KnowledgeDocumentRow as D
from app.storage.tables import KnowledgeFileRow as F
from app.storage.tables import KnowledgeVectorRow as V
from app.storage.tables import VectorStoreFileRow as VF

MAX_NAME = 200
MAX_DOCUMENT_NAME = 300
MAX_LOCATION = 200
MAX_QUERY_TERMS = 32
MAX_TERM_CHARS = 60
# English function words (the app's text search is English-stemmed on both backends).
STOPWORDS = frozenset("""a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
off on once only or other our ours ourselves out over own same she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we were what when where
which while who whom why will with would you your yours yourself yourselves""".split())
_WORD = re.compile(r"\w+")
_INSERT_BATCH = 500


class KnowledgeRefused(ValueError):
    """A request the store refuses, with a message for the user: a limit reached, a name taken, a missing
    collection."""


@dataclass(frozen=True)
class KnowledgeLimits:
    """What one user may keep (DEMO_KNOWLEDGE_MAX_*): each refused with a message that names the variable."""

    documents: int = 1000
    passages: int = 200_000
    megabytes: int = 1000  # of the files as uploaded


@dataclass(frozen=True)
class Collection:
    id: str
    name: str
    created_at: datetime
    updated_at: datetime
    documents: int
    passages: int


@dataclass(frozen=True)
class KnowledgeDocument:
    id: str
    collection_id: str
    name: str
    size_bytes: int
    characters: int
    passages: int
    note: str  # why reading stopped early, "" when it did not
    created_at: datetime


@dataclass(frozen=True)
class Hit:
    """A passage that matched, with its source; `score`: higher is better (BM25 or ts_rank, per backend)."""

    passage_id: int
    document_id: str
    document_name: str
    collection_id: str
    location: str
    text: str
    score: float


@dataclass(frozen=True)
class NewPassage:
    location: str
    text: str


class KnowledgeStore(EngineStore):
    """Collections, documents and passages on one engine. Thread-safe; database failures raise StorageError."""

    # ----- collections -------------------------------------------------------------------------------------------

    def create_collection(self, owner: str, name: str) -> Collection:
        name = _name(name)
        now = datetime.now(UTC)
        with self._writing() as session:
            taken = session.scalar(select(func.count()).where(C.owner == owner, C.name == name))
            if taken:
                raise KnowledgeRefused(f"You already have a collection named {name!r}: pick another name.")
            row = C(id=str(uuid.uuid4()), owner=owner, name=name, created_at=now, updated_at=now)
            session.add(row)
            try:
                session.flush()
            except IntegrityError as exc:  # made by another request at the same moment
                raise KnowledgeRefused(f"You already have a collection named {name!r}: pick another name.") from exc
        return Collection(row.id, row.name, now, now, 0, 0)

    def collections(self, owner: str) -> builtins.list[Collection]:
        """The owner's collections by name, with how many documents and passages each holds."""
        with self._reading() as session:
            rows = session.execute(
                select(C.id, C.name, C.created_at, C.updated_at, func.count(D.id), func.coalesce(func.sum(
                    D.chunk_count), 0))
                .outerjoin(D, D.collection_id == C.id).where(C.owner == owner)
                .group_by(C.id, C.name, C.created_at, C.updated_at).order_by(C.name, C.id)).all()
        return [Collection(*row[:4], int(row[4]), int(row[5])) for row in rows]

    def collection(self, owner: str, collection_id: str) -> Collection | None:
        return next((found for found in self.collections(owner) if found.id == collection_id), None)

    def rename_collection(self, owner: str, collection_id: str, name: str) -> None:
        name = _name(name)
        with self._writing() as session:
            if session.scalar(select(func.count()).where(C.owner == owner, C.name == name, C.id != collection_id)):
                raise KnowledgeRefused(f"You already have a collection named {name!r}: pick another name.")
            done = session.execute(update(C).where(C.owner == owner, C.id == collection_id).values(
                name=name, updated_at=datetime.now(UTC)))
            if not rowcount(done):
                raise KnowledgeRefused("That collection does not exist (any more).")

    def delete_collection(self, owner: str, collection_id: str) -> bool:
        """Deletes the collection with its documents and passages; False if there was none."""
        with self._writing() as session:
            documents = select(D.id).where(D.owner == owner, D.collection_id == collection_id)
            session.execute(delete(K).where(K.document_id.in_(documents)))  # the FTS triggers see each passage go
            session.execute(delete(D).where(D.owner == owner, D.collection_id == collection_id))
            return rowcount(session.execute(delete(C).where(C.owner == owner, C.id == collection_id))) > 0

    # ----- documents ---------------------------------------------------------------------------------------------

    def add_document(self, owner: str, collection_id: str, name: str, sha256: str, size_bytes: int,
                     passages: Sequence[NewPassage], note: str = "",
                     limits: KnowledgeLimits | None = None, data: bytes | None = None) -> KnowledgeDocument:
        """Stores a read document's passages, and `data`, its file, to read it again on a re-index. KnowledgeRefused
        when the collection is not the owner's, the same file is in it already, or the owner's limits would be
        passed.

        The document is first reserved against the limits (one owner's reservations one at a time: PostgreSQL
        takes an advisory lock on the owner, SQLite its write lock), then its passages are stored in batches, each
        a short transaction of its own, and it is found by searches once all are there. A failure on the way
        removes it again."""
        limits = limits or KnowledgeLimits()
        name = (printable(name) or "document")[:MAX_DOCUMENT_NAME]
        if not passages:
            raise KnowledgeRefused(f"{name} has no text to search.")
        now = datetime.now(UTC)
        characters = sum(len(passage.text) for passage in passages)
        with self._writing() as session:
            lock_owner(session, owner)
            if not session.scalar(select(func.count()).where(C.owner == owner, C.id == collection_id)):
                raise KnowledgeRefused("That collection does not exist (any more).")
            same = session.scalar(select(D.name).where(D.collection_id == collection_id, D.sha256 == sha256))
            if same is not None:
                raise KnowledgeRefused(f"{name} is in this collection already (as {same}).")
            _check_limits(session, owner, len(passages), size_bytes, limits)
            row = D(id=str(uuid.uuid4()), collection_id=collection_id, owner=owner, name=name, sha256=sha256,
                    size_bytes=size_bytes, characters=characters, chunk_count=len(passages), note=note[:2000],
                    ready=False, created_at=now)
            session.add(row)
            try:
                session.flush()
            except IntegrityError as exc:  # the same file, added by another request at the same moment
                raise KnowledgeRefused(f"{name} is in this collection already.") from exc
        try:
            if data is not None:
                with self._writing() as session:
                    session.add(F(document_id=row.id, data=data))
            self._store_passages(row.id, passages)
            with self._writing() as session:
                session.execute(update(D).where(D.id == row.id).values(ready=True))
                session.execute(update(C).where(C.id == collection_id).values(updated_at=now))
        except BaseException:
            self.delete_document(owner, row.id)  # what was stored of it goes, with its reservation
            raise
        row.ready = True
        return _document(row)

    def document_file(self, owner: str, document_id: str) -> bytes | None:
        """The owner's document's file as uploaded: kept with it, or (read through the API's vector stores) the
        /v1/files file it was read from, which is not stored twice. None when the document is not theirs, or has
        no file any more (added before the app kept files, or its API file was deleted)."""
        with self._reading() as session:
            kept = session.scalar(select(F.data).join(D, D.id == F.document_id)
                                  .where(D.owner == owner, D.id == document_id))
            if kept is not None:
                return kept
            return session.scalar(select(A.data).join(VF, VF.file_id == A.id).join(D, D.id == VF.document_id)
                                  .where(D.owner == owner, D.id == document_id, A.owner == owner).limit(1))

    def replace_passages(self, owner: str, document_id: str, passages: Sequence[NewPassage], note: str = "",
                         limits: KnowledgeLimits | None = None) -> KnowledgeDocument:
        """The document read again: its passages (and their vectors) replaced by `passages`, in one transaction,
        so that a search finds either the old passages or the new ones, and a failure (or a crash) on the way
        leaves the old ones. KnowledgeRefused when it is not the owner's (or was deleted meanwhile), or the new
        passages would take the owner past their limit; then nothing changed.

        One transaction holds SQLite's write lock while the passages are written: 2.8 s here for the largest
        document allowed (20,000 passages of 1,200 characters), within the 5 s other writers wait for it
        (app/storage/sqlite.py's busy timeout). A re-index is a user's deliberate, rare act."""
        limits = limits or KnowledgeLimits()
        if not passages:
            raise KnowledgeRefused("It has no text to search any more.")
        with self._writing() as session:
            lock_owner(session, owner)
            row = session.scalars(select(D).where(D.owner == owner, D.id == document_id, D.ready)).first()
            if row is None:
                raise KnowledgeRefused("That document is not there any more.")
            _check_limits(session, owner, len(passages) - row.chunk_count, 0, limits, new_document=False)
            session.execute(delete(K).where(K.document_id == document_id))  # the FTS triggers see each one go
            for start in range(0, len(passages), _INSERT_BATCH):
                session.execute(insert(K), _passage_rows(document_id, passages, start))
            row.chunk_count, row.characters = len(passages), sum(len(passage.text) for passage in passages)
            row.note = note[:2000]
            session.execute(update(C).where(C.id == row.collection_id).values(updated_at=datetime.now(UTC)))
            return _document(row)

    def _store_passages(self, document_id: str, passages: Sequence[NewPassage]) -> None:
        for start in range(0, len(passages), _INSERT_BATCH):
            with self._writing() as session:
                session.execute(insert(K), _passage_rows(document_id, passages, start))

    def find_document(self, owner: str, collection_id: str, sha256: str) -> KnowledgeDocument | None:
        """The document of these bytes in the collection, if it is there."""
        with self._reading() as session:
            row = session.scalars(select(D).where(D.owner == owner, D.collection_id == collection_id,
                                                  D.sha256 == sha256, D.ready)).first()
        return _document(row) if row is not None else None

    def collection_named(self, owner: str, name: str) -> Collection:
        """The owner's collection of this name, made if there is none (two callers at once get the same one)."""
        name = _name(name)
        for _ in range(2):
            found = next((c for c in self.collections(owner) if c.name == name), None)
            if found is not None:
                return found
            try:
                return self.create_collection(owner, name)
            except KnowledgeRefused:
                continue  # another request made it just now: read it
        raise KnowledgeRefused(f"The collection {name!r} could not be made; try again.")

    def documents(self, owner: str, collection_id: str) -> builtins.list[KnowledgeDocument]:
        with self._reading() as session:
            rows = session.scalars(select(D).where(D.owner == owner, D.collection_id == collection_id)
                                   .order_by(D.name, D.id)).all()
        return [_document(row) for row in rows]

    def delete_document(self, owner: str, document_id: str) -> bool:
        with self._writing() as session:
            owned = select(D.id).where(D.owner == owner, D.id == document_id)
            session.execute(delete(K).where(K.document_id.in_(owned)))
            return rowcount(session.execute(delete(D).where(D.owner == owner, D.id == document_id))) > 0

    # ----- search ------------------------------------------------------------------------------------------------

    def search(self, owner: str, collection_ids: Sequence[str], query: str, limit: int = 5,
               document_ids: Sequence[str] = ()) -> builtins.list[Hit]:
        """The passages of the owner's collections (and single documents) that best match `query`'s words, best
        first. The words are matched as words (any of them; stemmed), so no query syntax reaches the database."""
        words = list(dict.fromkeys(word.casefold() for word in _WORD.findall(query) if len(word) <= MAX_TERM_CHARS))
        # Words that say what is asked, not how: matched by every passage, they only cost (and they rank by chance).
        terms = [word for word in words if word not in STOPWORDS][:MAX_QUERY_TERMS]
        if not terms or not (collection_ids or document_ids):
            return []
        limit = max(1, min(int(limit), 50))
        with self._reading() as session:
            if session.get_bind().dialect.name == "postgresql":
                statement = text(
                    "SELECT c.id, c.document_id, d.name, d.collection_id, c.location, c.text, "
                    f"ts_rank(c.{KNOWLEDGE_TSVECTOR_COLUMN}, q, 1) AS score "
                    f"FROM knowledge_chunks c JOIN knowledge_documents d ON d.id = c.document_id, "
                    f"to_tsquery('{KNOWLEDGE_LANGUAGE}', :query) q "
                    f"WHERE c.{KNOWLEDGE_TSVECTOR_COLUMN} @@ q "
                    "AND d.owner = :owner AND d.ready AND (d.collection_id IN :ids OR d.id IN :documents) "
                    "ORDER BY score DESC, c.id LIMIT :limit")
                match = " | ".join(terms)
            else:
                statement = text(
                    "SELECT c.id, c.document_id, d.name, d.collection_id, c.location, c.text, "
                    f"-bm25({KNOWLEDGE_FTS_TABLE}) AS score FROM {KNOWLEDGE_FTS_TABLE} f "
                    "JOIN knowledge_chunks c ON c.id = f.rowid JOIN knowledge_documents d ON d.id = c.document_id "
                    f"WHERE {KNOWLEDGE_FTS_TABLE} MATCH :query AND d.owner = :owner AND d.ready "
                    "AND (d.collection_id IN :ids OR d.id IN :documents) ORDER BY score DESC, c.id LIMIT :limit")
                match = " OR ".join(f'"{term}"' for term in terms)  # \w+ words: no quote can be in one
            statement = statement.bindparams(bindparam("ids", expanding=True, type_=String()),
                                             bindparam("documents", expanding=True, type_=String()))
            rows = session.execute(statement, {"query": match, "owner": owner, "ids": list(collection_ids),
                                               "documents": list(document_ids), "limit": limit}).all()
        return [Hit(int(row[0]), row[1], row[2], row[3], row[4], row[5], float(row[6])) for row in rows]

    # ----- sentence embeddings (app/knowledge/retrieval.py) -------------------------------------------------------

    def unembedded(self, owner: str, model: str, collection_ids: Sequence[str], document_ids: Sequence[str] = (),
                   limit: int = 256) -> builtins.list[tuple[int, str]]:
        """Up to `limit` passages of the owner's collections (and single documents) that have no vector by `model`
        yet: (id, text), in the order they were stored."""
        if not (collection_ids or document_ids):
            return []
        embedded = select(V.passage_id).where(V.passage_id == K.id, V.model == model).exists()
        with self._reading() as session:
            rows = session.execute(select(K.id, K.text).join(D, D.id == K.document_id).where(
                _in_scope(owner, collection_ids, document_ids), ~embedded).order_by(K.id).limit(limit)).all()
        return [(int(row[0]), row[1]) for row in rows]

    def unembedded_count(self, owner: str, model: str, collection_ids: Sequence[str],
                         document_ids: Sequence[str] = ()) -> int:
        """How many passages in scope have no vector by `model` yet."""
        if not (collection_ids or document_ids):
            return 0
        embedded = select(V.passage_id).where(V.passage_id == K.id, V.model == model).exists()
        with self._reading() as session:
            return int(session.scalar(select(func.count()).select_from(K).join(D, D.id == K.document_id).where(
                _in_scope(owner, collection_ids, document_ids), ~embedded)) or 0)

    def add_vectors(self, model: str, vectors: Sequence[tuple[int, bytes]]) -> int:
        """Stores passages' vectors by `model` (float32, little-endian); a passage deleted meanwhile, or whose
        vector another process stored first, is skipped. How many were stored."""
        ids = [passage_id for passage_id, _ in vectors]
        with self._writing() as session:
            present = set(session.scalars(select(K.id).where(K.id.in_(ids))))
            present -= set(session.scalars(select(V.passage_id).where(V.model == model, V.passage_id.in_(ids))))
            rows = [{"passage_id": passage_id, "model": model, "vector": vector} for passage_id, vector in vectors
                    if passage_id in present]
            if rows:
                try:
                    with session.begin_nested():
                        session.execute(insert(V), rows)
                except IntegrityError:  # another process, at the same moment: its vectors are the same
                    return 0
        return len(rows)

    def nearest(self, owner: str, model: str, collection_ids: Sequence[str], query: Sequence[float],
                limit: int = 5, document_ids: Sequence[str] = ()) -> builtins.list[Hit]:
        """The passages whose vectors by `model` are closest to `query` (a unit vector of the same model): best
        first, `score` their cosine similarity. Exact: every vector in scope is read and compared (numpy), as
        sqlite-vec's and pgvector's exact search do; a user's scope is thousands of passages, not millions."""
        import numpy as np

        if not (collection_ids or document_ids):
            return []
        wanted = np.asarray(query, dtype="<f4")
        limit = max(1, min(int(limit), 200))
        best_ids = np.empty(0, dtype=np.int64)
        best_scores = np.empty(0, dtype=np.float32)
        with self._reading() as session:
            result = session.execute(
                select(V.passage_id, V.vector).join(K, K.id == V.passage_id).join(D, D.id == K.document_id)
                .where(V.model == model, _in_scope(owner, collection_ids, document_ids))
                .execution_options(yield_per=4096))
            for batch in result.partitions():
                kept = [row for row in batch if len(row[1]) == wanted.nbytes]  # another size: not this model's
                if not kept:
                    continue
                matrix = np.frombuffer(b"".join(row[1] for row in kept), dtype="<f4").reshape(len(kept), -1)
                best_ids = np.concatenate([best_ids, np.fromiter((row[0] for row in kept), np.int64, len(kept))])
                best_scores = np.concatenate([best_scores, matrix @ wanted])
                if len(best_ids) > limit:  # keep only the best `limit` so far: memory stays one batch
                    top = np.argpartition(-best_scores, limit - 1)[:limit]
                    best_ids, best_scores = best_ids[top], best_scores[top]
            order = np.argsort(-best_scores, kind="stable")
            ranked = [(int(best_ids[i]), float(best_scores[i])) for i in order]
            rows = {int(row[0]): row for row in session.execute(
                select(K.id, K.document_id, D.name, D.collection_id, K.location, K.text)
                .join(D, D.id == K.document_id).where(K.id.in_([passage_id for passage_id, _ in ranked]))).all()}
        return [Hit(passage_id, rows[passage_id][1], rows[passage_id][2], rows[passage_id][3], rows[passage_id][4],
                    rows[passage_id][5], score) for passage_id, score in ranked if passage_id in rows]

    def passage(self, owner: str, passage_id: int) -> Hit | None:
        """One passage by id (a citation's), if it is the owner's."""
        with self._reading() as session:
            row = session.execute(
                select(K.id, K.document_id, D.name, D.collection_id, K.location, K.text)
                .join(D, D.id == K.document_id).where(K.id == passage_id, D.owner == owner)).first()
        return Hit(int(row[0]), row[1], row[2], row[3], row[4], row[5], 0.0) if row else None


def _passage_rows(document_id: str, passages: Sequence[NewPassage], start: int) -> list[dict[str, object]]:
    """A batch of passages from `start`, as rows of knowledge_chunks."""
    return [{"document_id": document_id, "ordinal": index, "location": passage.location[:MAX_LOCATION],
             "text": passage.text} for index, passage in enumerate(passages[start:start + _INSERT_BATCH], start)]


def _in_scope(owner: str, collection_ids: Sequence[str], document_ids: Sequence[str]) -> ColumnElement[bool]:
    """The owner's ready documents in these collections, or these documents themselves."""
    return (D.owner == owner) & D.ready & or_(D.collection_id.in_(list(collection_ids)),
                                               D.id.in_(list(document_ids)))


def lock_owner(session: Session, owner: str) -> None:
    """One owner's reservations one at a time (PostgreSQL; SQLite's write lock already serialises writers)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:owner))"), {"owner": f"knowledge:{owner}"})


def _check_limits(session: Session, owner: str, passages: int, size_bytes: int, limits: KnowledgeLimits,
                  new_document: bool = True) -> None:
    """Refuses `passages` and `size_bytes` more (and a document more, when `new_document`) past the owner's limits.
    A re-read document's passages are counted as the change in its count, so one that shrank always passes."""
    documents, chunks, stored = session.execute(
        select(func.count(D.id), func.coalesce(func.sum(D.chunk_count), 0), func.coalesce(func.sum(D.size_bytes), 0))
        .where(D.owner == owner)).one()
    if new_document and documents + 1 > limits.documents:
        raise KnowledgeRefused(f"You keep {documents:,} documents, the most allowed (DEMO_KNOWLEDGE_MAX_DOCUMENTS): "
                               "delete some first.")
    if passages > 0 and chunks + passages > limits.passages:
        what = f"This document's {passages:,} passages" if new_document else \
            f"Read again, this document makes {passages:,} more passages, which"
        raise KnowledgeRefused(
            f"{what} would take you past {limits.passages:,} (DEMO_KNOWLEDGE_MAX_PASSAGES; you keep "
            f"{int(chunks):,}): delete some documents first.")
    if size_bytes > 0 and stored + size_bytes > limits.megabytes * 2**20:
        raise KnowledgeRefused(
            f"This document would take your documents past {limits.megabytes:,} MB (DEMO_KNOWLEDGE_MAX_MB; you keep "
            f"{int(stored) / 2**20:,.1f} MB): delete some documents first.")


def printable(text: str) -> str:
    """`text` without control characters (PostgreSQL's text refuses NUL; none belongs in a name), spaces collapsed."""
    return " ".join("".join(character for character in str(text) if character.isprintable() or character.isspace())
                    .split())


def _name(name: str) -> str:
    name = printable(name)
    if not name:
        raise KnowledgeRefused("A collection needs a name.")
    if len(name) > MAX_NAME:
        raise KnowledgeRefused(f"A collection's name is at most {MAX_NAME} characters.")
    return name


def _document(row: D) -> KnowledgeDocument:
    return KnowledgeDocument(row.id, row.collection_id, row.name, row.size_bytes, row.characters, row.chunk_count,
                             row.note, row.created_at)
