"""Create knowledge_files: each knowledge document's file as it was uploaded, so that a collection can be re-read
(re-indexed) with the current reader, passage size and embedding model.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "knowledge_files",
        sa.Column("document_id", sa.String(36), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["knowledge_documents.id"], ondelete="CASCADE",
                                name="fk_knowledge_files_document_id_knowledge_documents"),
        sa.PrimaryKeyConstraint("document_id", name="pk_knowledge_files"),
    )


def downgrade() -> None:
    op.drop_table("knowledge_files")
