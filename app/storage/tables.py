"""The tables. Conversations hold their settings and counters; messages are rows appended in order (a truncation
deletes the dropped ones; a database written before versions existed may still hold rows marked `deleted`), each
holding one message as JSON text (app/storage/codec.py) and a lower-cased copy of its text for search; preferences
hold each user's last settings; api_responses hold the API server's stored responses (app/storage/responses.py);
mcp_tokens hold each user's sign-ins to MCP servers, encrypted (app/storage/mcp_tokens.py); compare_votes hold the
votes of the Compare page (app/storage/compare_votes.py); knowledge_collections, knowledge_documents and
knowledge_chunks hold users' documents as searchable passages, knowledge_files their files as uploaded and
knowledge_vectors the passages' embeddings (app/storage/knowledge.py); presets hold each user's saved settings
(app/storage/presets.py); folders and conversation_tags organise the history; eval_sets hold each user's eval
sets and eval_runs their runs' reports (app/storage/eval_sets.py).
The migrations in migrations/versions create exactly this; tests compare the two."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    false,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Explicit constraint names, so that a later migration can drop or alter them by name on every backend.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
TRIGRAM_INDEX = "ix_messages_search_text_trgm"
# Full-text search over knowledge passages: a GIN index on PostgreSQL (over the stored tsvector), an FTS5 table
# on SQLite (kept level with knowledge_chunks by triggers). Both are made by migration 0007 only.
KNOWLEDGE_TSVECTOR_INDEX = "ix_knowledge_chunks_text_tsvector"
KNOWLEDGE_FTS_TABLE = "knowledge_chunks_fts"
# PostgreSQL only (made by migration 0007, unknown to the model): each passage's tsvector, stored, so that ranking
# reads it instead of parsing every matching passage's text again (600 ms a search at 15,000 passages before).
KNOWLEDGE_TSVECTOR_COLUMN = "text_search"
KNOWLEDGE_LANGUAGE = "english"  # PostgreSQL's text search configuration; SQLite's FTS5 uses the Porter stemmer


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend. SQLite has no time zones: values are stored there as naive
    UTC text (which sorts in time order) and come back aware."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass a timezone-aware one")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class ConversationRow(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4: not guessable, no sequence
    owner: Mapped[str] = mapped_column(String(200))
    page: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(200))
    settings: Mapped[dict[str, Any]]
    version: Mapped[int]  # optimistic concurrency: bumped by truncate and rename, not by append
    message_count: Mapped[int]  # the next message's seq: never goes down, so a seq is never reused
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]  # the last append, truncation or rename
    # The folder it is in (folders.id; no foreign key: see migration 0012), and whether it is pinned at the top.
    folder_id: Mapped[str | None] = mapped_column(String(36))
    pinned: Mapped[bool] = mapped_column(server_default=false())

    # The history list: one owner's conversations, newest first (id breaks ties, so paging is stable); a folder's.
    __table_args__ = (Index("ix_conversations_owner_updated_at", "owner", "updated_at", "id"),
                      Index("ix_conversations_owner_folder_id", "owner", "folder_id"))


class FolderRow(Base):
    """A user's folder of conversations (app/storage/repository.py)."""

    __tablename__ = "folders"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_folders_owner_name", "owner", "name", unique=True),)


class ConversationTagRow(Base):
    """A tag on a conversation; gone with it."""

    __tablename__ = "conversation_tags"

    conversation_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(40), primary_key=True)

    __table_args__ = (Index("ix_conversation_tags_tag", "tag"),)


class MessageRow(Base):
    __tablename__ = "messages"

    conversation_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    # Before the payload: SQLite reads a row's columns in order, so filters need not read a large payload.
    deleted: Mapped[bool] = mapped_column(server_default=false())
    search_text: Mapped[str] = mapped_column(Text)  # content and display text, lower-cased (codec.search_text)
    payload: Mapped[str] = mapped_column(Text)  # one message as JSON (codec.encode_message_json)
    created_at: Mapped[datetime]

    # PostgreSQL: a trigram index lets `search_text LIKE '%term%'` use an index (pg_trgm; the migration skips it
    # with a warning where the extension cannot be created). SQLite scans one owner's messages, which is fast
    # enough for one machine's history.
    __table_args__ = (
        Index(TRIGRAM_INDEX, "search_text", postgresql_using="gin",
              postgresql_ops={"search_text": "gin_trgm_ops"}).ddl_if(dialect="postgresql"),
    )


class PreferencesRow(Base):
    """One user's last settings (app/storage/schema.py, PreferencesRecord), restored after a refresh."""

    __tablename__ = "preferences"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    settings: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime]


class ApiResponseRow(Base):
    """One stored response of the API's /v1/responses. previous_response_id is deliberately no foreign key: deleting
    a response must leave the responses that continued it readable (only a chain through it breaks)."""

    __tablename__ = "api_responses"

    id: Mapped[str] = mapped_column(String(100), primary_key=True)  # "resp_...", made by the server
    owner: Mapped[str] = mapped_column(String(200))  # opaque; "" where the server has no API key
    created_at: Mapped[datetime]  # the response's own created_at: retention counts from it
    previous_response_id: Mapped[str | None] = mapped_column(String(100))
    # Bytes of its JSON (input_items and response): a chain and the whole store are sized from this, no body read.
    size: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # The large JSON last: SQLite reads a row's columns in order, so the chain walk need not read it.
    input_items: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    response: Mapped[dict[str, Any]]

    __table_args__ = (
        Index("ix_api_responses_owner_created_at", "owner", "created_at"),  # one owner's by age (reads go by id)
        Index("ix_api_responses_created_at", "created_at"),  # the purge of expired ones, across owners
    )


class McpTokenRow(Base):
    """One user's sign-in to one MCP server (app/storage/mcp_tokens.py): the OAuth tokens and the client the app
    registered with the server's authorization server, each a Fernet token (encrypted and authenticated), never
    plain text."""

    __tablename__ = "mcp_tokens"

    owner: Mapped[str] = mapped_column(String(200), primary_key=True)
    server: Mapped[str] = mapped_column(String(64), primary_key=True)  # SHA-256 of the server's URL, in hex
    tokens: Mapped[str | None] = mapped_column(Text)
    client_info: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime]


class CompareVoteRow(Base):
    """One vote between two answers to the same prompt (app/storage/compare_votes.py). The two targets' labels and
    the answers' figures have columns of their own, before the large JSON and text: the leaderboard reads only
    those."""

    __tablename__ = "compare_votes"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4
    owner: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    verdict: Mapped[str] = mapped_column(String(16))  # "a", "b", "tie" or "both_bad"
    label_a: Mapped[str] = mapped_column(String(200))
    label_b: Mapped[str] = mapped_column(String(200))
    metrics: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # the two answers' figures, A then B
    targets: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # [{"label": ..., "settings": {...}}] for A and B
    prompt: Mapped[str] = mapped_column(Text)
    answers: Mapped[list[str]] = mapped_column(JSON)  # the two answers' text, A then B

    __table_args__ = (
        Index("ix_compare_votes_owner_created_at", "owner", "created_at"),  # one owner's votes, newest first
        Index("ix_compare_votes_created_at", "created_at"),  # the leaderboard over every owner's, in order
    )


class KnowledgeCollectionRow(Base):
    """A user's named set of documents (a conversation's attached long documents form one too)."""

    __tablename__ = "knowledge_collections"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    __table_args__ = (Index("ix_knowledge_collections_owner_name", "owner", "name", unique=True),)


class KnowledgeDocumentRow(Base):
    """One file read into a collection: its figures, for the page and the per-user limits."""

    __tablename__ = "knowledge_documents"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    collection_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("knowledge_collections.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(200))  # the collection's, kept here for the per-user sums
    name: Mapped[str] = mapped_column(String(300))
    sha256: Mapped[str] = mapped_column(String(64))  # of the file's bytes: the same file is not read twice
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    characters: Mapped[int] = mapped_column(BigInteger)
    chunk_count: Mapped[int]
    note: Mapped[str] = mapped_column(Text)  # why reading stopped early, "" when it did not
    # False while its passages are being stored (in batches, so a large document never holds SQLite's write lock
    # for long): counted against the limits already, found by no search yet.
    ready: Mapped[bool] = mapped_column(server_default=false())
    created_at: Mapped[datetime]

    __table_args__ = (
        # The same file once per collection, also when two uploads of it race.
        Index("ix_knowledge_documents_collection_id_sha256", "collection_id", "sha256", unique=True),
        Index("ix_knowledge_documents_owner", "owner"),
    )


class KnowledgeChunkRow(Base):
    """One passage of a document, with where it is. Its integer id is the full-text index's row id."""

    __tablename__ = "knowledge_chunks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("knowledge_documents.id", ondelete="CASCADE"))
    ordinal: Mapped[int]  # its place in the document
    location: Mapped[str] = mapped_column(String(200))  # "page 212", "slide 3", a heading, "line 40"
    text: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        Index("ix_knowledge_chunks_document_id_ordinal", "document_id", "ordinal"),
        Index(KNOWLEDGE_TSVECTOR_INDEX, sql_text(KNOWLEDGE_TSVECTOR_COLUMN),
              postgresql_using="gin").ddl_if(dialect="postgresql"),
        {"sqlite_autoincrement": True},  # a deleted passage's id is never reused: a stored citation names one
    )


class KnowledgeVectorRow(Base):
    """A passage's sentence embedding by one model: unit-length float32, little-endian (app/knowledge/retrieval.py).
    Made the first time a search with that model reaches the passage; gone with the passage."""

    __tablename__ = "knowledge_vectors"

    passage_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("knowledge_chunks.id", ondelete="CASCADE"), primary_key=True)
    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    vector: Mapped[bytes] = mapped_column(LargeBinary)


class KnowledgeFileRow(Base):
    """A knowledge document's file as uploaded (its size counts against the owner's DEMO_KNOWLEDGE_MAX_MB): read
    again when its collection is re-indexed. Gone with the document."""

    __tablename__ = "knowledge_files"

    document_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("knowledge_documents.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class PresetRow(Base):
    """One user's saved preset (app/storage/presets.py): the fields it sets, as app/presets/preset.py checks them."""

    __tablename__ = "presets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(100))
    settings: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    __table_args__ = (Index("ix_presets_owner_name", "owner", "name", unique=True),)


class EvalSetRow(Base):
    """One user's eval set (app/storage/eval_sets.py): the whole set as one document, as app/evals/cases.py checks
    it; `version` guards a read-modify-write (a case added in two tabs at once)."""

    __tablename__ = "eval_sets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a random UUID4
    owner: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    document: Mapped[dict[str, Any]]
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    __table_args__ = (Index("ix_eval_sets_owner_name", "owner", "name", unique=True),)


class EvalRunRow(Base):
    """One run of an eval set: its report (app/evals/report.py), gone with the set."""

    __tablename__ = "eval_runs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    set_id: Mapped[str] = mapped_column(String(36), ForeignKey("eval_sets.id", ondelete="CASCADE"))
    created_at: Mapped[datetime]
    report: Mapped[dict[str, Any]]

    __table_args__ = (Index("ix_eval_runs_set_id_created_at", "set_id", "created_at"),)


class ApiFileRow(Base):
    """A file uploaded through the API's /v1/files (OpenAI's Files API), with its bytes: added to a vector store, it
    is read into that knowledge collection (app/storage/api_files.py)."""

    __tablename__ = "api_files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "file-" and 24 hex digits
    owner: Mapped[str] = mapped_column(String(200))
    filename: Mapped[str] = mapped_column(String(300))
    purpose: Mapped[str] = mapped_column(String(40))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    data: Mapped[bytes] = mapped_column(LargeBinary)  # last: listing reads the columns before it only

    __table_args__ = (Index("ix_api_files_owner_created_at", "owner", "created_at"),)


class VectorStoreFileRow(Base):
    """A file added to a vector store (a knowledge collection) through the API, and what came of reading it: its
    document, or why it failed. Goes with the collection, the file or the document."""

    __tablename__ = "api_vector_store_files"

    collection_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("knowledge_collections.id", ondelete="CASCADE"), primary_key=True)
    file_id: Mapped[str] = mapped_column(String(40), ForeignKey("api_files.id", ondelete="CASCADE"), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    document_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("knowledge_documents.id", ondelete="CASCADE"))
    # Read from this file (deleted with it, unless another file of the same bytes takes it over), not a document
    # that was in the collection already (one added on the Knowledge page is never deleted through the API).
    owns_document: Mapped[bool] = mapped_column(server_default=false())
    status: Mapped[str] = mapped_column(String(20))  # "completed" or "failed"
    error_code: Mapped[str] = mapped_column(String(40))  # OpenAI's last_error.code, "" when it did not fail
    error_message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_api_vector_store_files_file_id", "file_id"),
                      Index("ix_api_vector_store_files_document_id", "document_id"))
