"""Create mcp_tokens: users' sign-ins to MCP servers (OAuth tokens and registered clients), encrypted.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_tokens",
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("tokens", sa.Text(), nullable=True),
        sa.Column("client_info", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "server", name="pk_mcp_tokens"),
    )


def downgrade() -> None:
    op.drop_table("mcp_tokens")
