"""Organise the history: folders (table folders), a folder and a pin on each conversation, and tags (table
conversation_tags).

conversations.folder_id is no foreign key on purpose: adding one to SQLite means rebuilding the table, which would
cascade-delete every message under PRAGMA foreign_keys. Deleting a folder moves its conversations out (or deletes
them) in app/storage/folders.py, in the same transaction.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "folders",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_folders"),
    )
    op.create_index("ix_folders_owner_name", "folders", ["owner", "name"], unique=True)
    op.add_column("conversations", sa.Column("folder_id", sa.String(36), nullable=True))
    op.add_column("conversations", sa.Column("pinned", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_index("ix_conversations_owner_folder_id", "conversations", ["owner", "folder_id"])
    op.create_table(
        "conversation_tags",
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("tag", sa.String(40), nullable=False),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE",
                                name="fk_conversation_tags_conversation_id_conversations"),
        sa.PrimaryKeyConstraint("conversation_id", "tag", name="pk_conversation_tags"),
    )
    op.create_index("ix_conversation_tags_tag", "conversation_tags", ["tag"])


def downgrade() -> None:
    op.drop_table("conversation_tags")
    op.drop_index("ix_conversations_owner_folder_id", "conversations")
    # ALTER TABLE ... DROP COLUMN in place (SQLite 3.35+): a batch rebuild of conversations would drop the table,
    # and with it, under PRAGMA foreign_keys, every message.
    op.execute("ALTER TABLE conversations DROP COLUMN pinned")
    op.execute("ALTER TABLE conversations DROP COLUMN folder_id")
    op.drop_table("folders")
