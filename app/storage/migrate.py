"""Brings a database's schema to the newest migration (Alembic, scripts in ./migrations), as the app starts.

Several processes may start at once: the upgrade runs in one transaction that first takes a lock (PostgreSQL: an
advisory lock; SQLite: BEGIN IMMEDIATE, waiting up to the busy timeout), so the others wait, then find the schema
current and do nothing. To write the next migration, add a file to migrations/versions by hand, or let Alembic draft
one against a database at head: `command.revision(config, message, autogenerate=True)` with a Config made by
`alembic_config()` and a connection in `config.attributes["connection"]`, then review it.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, func, select

from app.storage.sqlite import WRITE

MIGRATIONS = Path(__file__).with_name("migrations")
ADVISORY_LOCK_KEY = 0x636F6E7673  # any fixed number, the same in every process of this app ("convs")


def alembic_config() -> Config:
    """Alembic's configuration without an alembic.ini: just where the scripts are."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))  # ini-style interpolation
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    config = alembic_config()
    with engine.connect() as connection:
        connection.execution_options(**WRITE)
        with connection.begin():
            if connection.dialect.name == "postgresql":
                # Released when this transaction ends; PostgreSQL's DDL is transactional, so the next process sees
                # either nothing or the whole upgrade.
                connection.execute(select(func.pg_advisory_xact_lock(ADVISORY_LOCK_KEY)))
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
