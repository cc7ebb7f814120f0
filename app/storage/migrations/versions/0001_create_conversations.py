"""Create conversations and messages.

Revision ID: 0001
Revises:
Create Date: 2026-05-10
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger(__name__)


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("page", sa.String(64), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
    )
    op.create_index("ix_conversations_owner_updated_at", "conversations", ["owner", "updated_at", "id"])
    op.create_table(
        "messages",
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("deleted", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name="fk_messages_conversation_id_conversations"),
        sa.PrimaryKeyConstraint("conversation_id", "seq", name="pk_messages"),
    )
    if op.get_bind().dialect.name == "postgresql":
        _trigram_index()


def _trigram_index() -> None:
    """Search's `LIKE '%term%'` through an index. pg_trgm ships with PostgreSQL and is a trusted extension, but a
    role may still lack the right to create it: then search works without the index (slower) and this says how to
    add it."""
    connection = op.get_bind()
    try:
        with connection.begin_nested():
            connection.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except sa.exc.DBAPIError as exc:
        log.warning("pg_trgm is not available (%s): conversation search will not use an index. A database owner "
                    "can add it: CREATE EXTENSION pg_trgm; CREATE INDEX ix_messages_search_text_trgm ON messages "
                    "USING gin (search_text gin_trgm_ops);", exc.orig)
        return
    op.create_index("ix_messages_search_text_trgm", "messages", ["search_text"], postgresql_using="gin",
                    postgresql_ops={"search_text": "gin_trgm_ops"})


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("conversations")
