"""api_responses.size: each stored response's bytes of JSON, so that a chain of previous responses and the whole
store are sized from the rows' metadata before any body is loaded.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # On SQLite the table is rebuilt so that the column comes before the large JSON: SQLite reads a row's columns in
    # order, and the chain walk reads only the columns before them. (PostgreSQL keeps large values out of line.)
    column = sa.Column("size", sa.BigInteger(), server_default="0", nullable=False)
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("api_responses", recreate="always") as batch:
            batch.add_column(column, insert_before="input_items")
    else:
        op.add_column("api_responses", column)
    # The rows stored before: their JSON's length as the database holds it.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE api_responses SET size = octet_length(input_items::text) + octet_length(response::text)")
    else:
        op.execute("UPDATE api_responses SET size = length(CAST(input_items AS BLOB)) + "
                   "length(CAST(response AS BLOB))")


def downgrade() -> None:
    with op.batch_alter_table("api_responses") as batch:
        batch.drop_column("size")
