"""The database connection: `open_database()` builds the engine (SQLite in the cache folder unless
DEMO_DATABASE_URL names another database) and brings the schema to the newest migration before anything uses it.

A SQLite file the app creates is readable by its owner only (0600): it holds every conversation and the MCP
sign-ins. SQLite gives its -wal and -shm files the database file's mode. A file that exists already keeps the mode
it has: that is its administrator's choice."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, cast

from sqlalchemy import URL, CursorResult, Engine, Result, create_engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from app.config import DatabaseSettings
from app.storage import sqlite
from app.storage.errors import StorageError
from app.storage.migrate import upgrade_to_head

# allow_nan=False: PostgreSQL's json type rejects NaN, so it is refused on every backend alike.
_json_dumps = functools.partial(json.dumps, ensure_ascii=False, allow_nan=False)


def open_database(url: str | None = None) -> Engine:
    """An engine on `url` (None: DatabaseSettings.from_env().url) whose schema is at the newest migration; a SQLite
    file's folder is created. Several processes may call this at once on one database. Raises StorageError when
    the database cannot be reached or migrated."""
    target = database_url(url if url is not None else DatabaseSettings.from_env().url)
    try:
        if target.get_backend_name() == "sqlite":
            if target.database and target.database != ":memory:" and not target.database.startswith("file:"):
                _create_private(Path(target.database).expanduser())
            engine = create_engine(target, json_serializer=_json_dumps)
            sqlite.configure(engine)
        else:
            # pre_ping: a shared server restarts now and then; a dead pooled connection is replaced, not an error.
            engine = create_engine(target, json_serializer=_json_dumps, pool_pre_ping=True)
        upgrade_to_head(engine)
    except (SQLAlchemyError, OSError) as exc:
        raise StorageError(f"cannot open the conversation database {target!r}: {exc}") from exc
    return engine


def _create_private(path: Path) -> None:
    """Create the SQLite file `path` (and its folder) empty with mode 0600, unless it exists. SQLite would create
    it 0644 (less the umask), readable by every user of the machine; an empty file is a valid empty database."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:  # there already, or another process created it a moment ago
        pass


def database_url(url: str) -> URL:
    """The URL, with psycopg 3 as PostgreSQL's driver where none is named (SQLAlchemy would pick psycopg2, which is
    not installed); `postgres://`, as some hosting services write it, is understood too."""
    target = make_url(url)
    if target.drivername in ("postgres", "postgresql"):
        target = target.set(drivername="postgresql+psycopg")
    return target


def rowcount(result: Result[Any]) -> int:
    """The rows an UPDATE or DELETE matched. Its result is a CursorResult, which Session.execute's type leaves
    out."""
    return cast(CursorResult[Any], result).rowcount
