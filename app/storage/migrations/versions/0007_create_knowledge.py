"""Create knowledge_collections, knowledge_documents and knowledge_chunks, with full-text search over the chunks:
an FTS5 table kept level by triggers on SQLite, a GIN index on the text's tsvector on PostgreSQL.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite: an external-content FTS5 table (it stores only the index; the text stays in knowledge_chunks). Porter
# stemming over unicode61, accents folded: "running" finds "run", "café" finds "cafe".
SQLITE_FTS = [
    "CREATE VIRTUAL TABLE knowledge_chunks_fts USING fts5(text, content='knowledge_chunks', content_rowid='id', "
    "tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER knowledge_chunks_fts_insert AFTER INSERT ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_chunks_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER knowledge_chunks_fts_delete AFTER DELETE ON knowledge_chunks BEGIN "
    "INSERT INTO knowledge_chunks_fts(knowledge_chunks_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
]


def upgrade() -> None:
    op.create_table(
        "knowledge_collections",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_collections"),
    )
    op.create_index("ix_knowledge_collections_owner_name", "knowledge_collections", ["owner", "name"], unique=True)
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("collection_id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("characters", sa.BigInteger(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("ready", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["collection_id"], ["knowledge_collections.id"], ondelete="CASCADE",
                                name="fk_knowledge_documents_collection_id_knowledge_collections"),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_documents"),
    )
    op.create_index("ix_knowledge_documents_collection_id_sha256", "knowledge_documents", ["collection_id", "sha256"],
                    unique=True)
    op.create_index("ix_knowledge_documents_owner", "knowledge_documents", ["owner"])
    op.create_table(
        "knowledge_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("document_id", sa.String(36), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("location", sa.String(200), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["knowledge_documents.id"], ondelete="CASCADE",
                                name="fk_knowledge_chunks_document_id_knowledge_documents"),
        sa.PrimaryKeyConstraint("id", name="pk_knowledge_chunks"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_knowledge_chunks_document_id_ordinal", "knowledge_chunks", ["document_id", "ordinal"])
    if op.get_bind().dialect.name == "postgresql":
        # The tsvector stored beside the text: a search ranks the passages it matches without parsing them again.
        op.execute("ALTER TABLE knowledge_chunks ADD COLUMN text_search tsvector "
                   "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED")
        op.create_index("ix_knowledge_chunks_text_tsvector", "knowledge_chunks", [sa.text("text_search")],
                        postgresql_using="gin")
    elif op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_FTS:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TABLE IF EXISTS knowledge_chunks_fts")  # its triggers go with knowledge_chunks
    op.drop_table("knowledge_chunks")
    op.drop_table("knowledge_documents")
    op.drop_table("knowledge_collections")
