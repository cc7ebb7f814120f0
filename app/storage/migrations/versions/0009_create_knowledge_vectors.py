"""Create knowledge_vectors: each passage's sentence embedding, per embedding model, for hybrid search.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "knowledge_vectors",
        sa.Column("passage_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["passage_id"], ["knowledge_chunks.id"], ondelete="CASCADE",
                                name="fk_knowledge_vectors_passage_id_knowledge_chunks"),
        sa.PrimaryKeyConstraint("passage_id", "model", name="pk_knowledge_vectors"),
    )


def downgrade() -> None:
    op.drop_table("knowledge_vectors")
