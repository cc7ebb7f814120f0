"""Create compare_votes: the Compare page's votes between two targets' answers to one prompt.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "compare_votes",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("label_a", sa.String(200), nullable=False),
        sa.Column("label_b", sa.String(200), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_compare_votes"),
    )
    op.create_index("ix_compare_votes_owner_created_at", "compare_votes", ["owner", "created_at"])
    op.create_index("ix_compare_votes_created_at", "compare_votes", ["created_at"])


def downgrade() -> None:
    op.drop_table("compare_votes")  # its indexes go with it
