"""Create api_responses: the API server's stored responses (/v1/responses with store=true).

Revision ID: 0003
Revises: 0002
Create Date: 2026-06-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_responses",
        sa.Column("id", sa.String(100), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("previous_response_id", sa.String(100), nullable=True),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_api_responses"),
    )
    op.create_index("ix_api_responses_owner_created_at", "api_responses", ["owner", "created_at"])
    op.create_index("ix_api_responses_created_at", "api_responses", ["created_at"])


def downgrade() -> None:
    op.drop_table("api_responses")  # its indexes go with it
