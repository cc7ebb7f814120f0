"""Create api_files (files uploaded through the API's /v1/files, with their bytes) and api_vector_store_files (which
file went into which knowledge collection through /v1/vector_stores, and what came of it).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_files",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("filename", sa.String(300), nullable=False),
        sa.Column("purpose", sa.String(40), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_files"),
    )
    op.create_index("ix_api_files_owner_created_at", "api_files", ["owner", "created_at"])
    op.create_table(
        "api_vector_store_files",
        sa.Column("collection_id", sa.String(36), nullable=False),
        sa.Column("file_id", sa.String(40), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("document_id", sa.String(36), nullable=True),
        sa.Column("owns_document", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("error_code", sa.String(40), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["collection_id"], ["knowledge_collections.id"], ondelete="CASCADE",
                                name="fk_api_vector_store_files_collection_id_knowledge_collections"),
        sa.ForeignKeyConstraint(["file_id"], ["api_files.id"], ondelete="CASCADE",
                                name="fk_api_vector_store_files_file_id_api_files"),
        sa.ForeignKeyConstraint(["document_id"], ["knowledge_documents.id"], ondelete="CASCADE",
                                name="fk_api_vector_store_files_document_id_knowledge_documents"),
        sa.PrimaryKeyConstraint("collection_id", "file_id", name="pk_api_vector_store_files"),
    )
    op.create_index("ix_api_vector_store_files_file_id", "api_vector_store_files", ["file_id"])
    op.create_index("ix_api_vector_store_files_document_id", "api_vector_store_files", ["document_id"])


def downgrade() -> None:
    op.drop_table("api_vector_store_files")
    op.drop_table("api_files")
