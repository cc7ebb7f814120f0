"""Create eval_sets (each user's eval sets, one document each) and eval_runs (their runs' reports).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "eval_sets",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_eval_sets"),
    )
    op.create_index("ix_eval_sets_owner_name", "eval_sets", ["owner", "name"], unique=True)
    op.create_table(
        "eval_runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("set_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["set_id"], ["eval_sets.id"], name="fk_eval_runs_set_id_eval_sets",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_eval_runs"),
    )
    op.create_index("ix_eval_runs_set_id_created_at", "eval_runs", ["set_id", "created_at"])


def downgrade() -> None:
    op.drop_table("eval_runs")
    op.drop_table("eval_sets")
