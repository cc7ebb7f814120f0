"""A throwaway PostgreSQL server for the storage tests and benchmarks: Debian's postgresql binaries, a data folder in
the temp folder, 127.0.0.1 on a free port, no fsync, stopped and removed at the end. It trusts every local
connection: it lives only as long as the tests, on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, create_engine, insert, make_url, select, text

from app.storage import sqlite as sqlite_setup
from app.storage.database import _json_dumps, database_url
from app.storage.migrate import alembic_config
from app.storage.tables import (
    KNOWLEDGE_FTS_TABLE,
    KNOWLEDGE_TSVECTOR_COLUMN,
    KNOWLEDGE_TSVECTOR_INDEX,
    TRIGRAM_INDEX,
    Base,
)
from harness.local_http import free_port

NOT_INSTALLED = ("Debian's postgresql is not installed (apt-get install postgresql): the PostgreSQL variant of the "
                 "storage tests needs its initdb and pg_ctl")


def postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb, if any."""
    found = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    return max(found, key=lambda path: int(path.parent.name), default=None) if found else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server; yields the URL of its `postgres` database (superuser `postgres`, no password)."""
    binaries = postgres_bin()
    if binaries is None:
        raise FileNotFoundError(NOT_INSTALLED)
    folder = Path(tempfile.mkdtemp(prefix="composite-demo-postgres-"))
    data, port = folder / "data", free_port()
    # PostgreSQL refuses to run as root: as root, run it as Debian's postgres user, which owns the folder.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(folder, "postgres", "postgres")

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, timeout=120)

    try:
        run(str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8",
            "--no-sync")
        run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w", "-t", "60", "-o",
            f"-h 127.0.0.1 -p {port} -k {folder} -F -c max_connections=200", "start")
    except subprocess.CalledProcessError as exc:
        log = folder / "server.log"
        details = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')}{details}") from exc
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def new_database(admin_url: str) -> str:
    """Create an empty database on the server; returns its URL."""
    name = "test_" + uuid.uuid4().hex[:12]
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")  # CREATE DATABASE cannot run in a transaction
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def engine_at(url: str, revision: str) -> Engine:
    """An engine on `url` whose schema is at the migration `revision`, set up as open_database sets one up: for
    tests of the upgrade from there."""
    target = database_url(url)
    engine = create_engine(target, json_serializer=_json_dumps)
    if target.get_backend_name() == "sqlite":
        sqlite_setup.configure(engine)
    migrate(engine, "upgrade", revision)
    return engine


def old_conversation(engine: Engine, owner: str, title: str, texts: list[str],
                     settings: dict[str, Any] | None = None) -> str:
    """A conversation of user messages written with only the columns every revision has (0001's), as an older
    version of the app wrote it: for tests of the upgrade from an old revision, where today's ConversationStore,
    which knows later columns, cannot write. Its id."""
    from app.domain.conversation import Message
    from app.storage import codec
    from app.storage.tables import ConversationRow, MessageRow

    conversation_id, now = str(uuid.uuid4()), datetime.now(UTC)
    with engine.begin() as connection:
        connection.execute(insert(ConversationRow.__table__).values(
            id=conversation_id, owner=owner, page="chat", title=title, settings=settings or {}, version=1,
            message_count=len(texts), created_at=now, updated_at=now))
        for seq, text in enumerate(texts):
            message = Message("user", text)
            connection.execute(insert(MessageRow.__table__).values(
                conversation_id=conversation_id, seq=seq, deleted=False, search_text=codec.search_text(message),
                payload=codec.encode_message_json(message), created_at=now))
    return conversation_id


def old_texts(engine: Engine, conversation_id: str) -> list[str]:
    """The messages' texts of a conversation, read with only the columns every revision has."""
    from app.storage import codec
    from app.storage.tables import MessageRow

    with engine.connect() as connection:
        payloads = connection.scalars(select(MessageRow.payload).where(MessageRow.conversation_id == conversation_id)
                                      .order_by(MessageRow.seq)).all()
    return [codec.decode_message_json(payload).content for payload in payloads]


def migrate(engine: Engine, direction: str, revision: str) -> None:
    """Alembic's `upgrade` or `downgrade` of `engine`'s schema to `revision`."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, direction)(config, revision)


def schema_differences(engine: Engine) -> list[Any]:
    """What a migrated database has beyond, or lacks of, what the models declare (Base.metadata), leaving out what
    the models cannot declare."""
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    # The trigram and tsvector indexes exist on PostgreSQL only (ddl_if), which autogenerate does not know; SQLite's
    # full-text search over knowledge passages is an FTS5 virtual table (with its shadow tables) the models leave out.
    # PostgreSQL's stored tsvector of each passage is a generated column the models leave out too.
    postgres_only = {TRIGRAM_INDEX, KNOWLEDGE_TSVECTOR_INDEX}
    return [d for d in differences
            if not (engine.dialect.name == "sqlite" and d[0] == "add_index" and d[1].name in postgres_only)
            and not (d[0] == "remove_table" and d[1].name.startswith(KNOWLEDGE_FTS_TABLE))
            and not (d[0] == "remove_column" and d[3].name == KNOWLEDGE_TSVECTOR_COLUMN)]
