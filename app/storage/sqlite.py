"""SQLite set up for several threads and processes at once: WAL, foreign keys, a busy timeout, transactions that
SQLAlchemy begins itself, and BEGIN IMMEDIATE for those that will write."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Connection, Engine, event

BUSY_TIMEOUT_MS = 5000
# Execution option of a transaction that will write (harmless elsewhere). On SQLite it begins with BEGIN IMMEDIATE:
# the write lock is taken, waiting up to the busy timeout, before the first read. A transaction that read first and
# then finds another process wrote meanwhile would get SQLITE_BUSY at once, with no waiting.
WRITE = {"storage_write": True}


def configure(engine: Engine) -> None:
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)


def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    # SQLAlchemy emits BEGIN itself (below) instead of the driver's legacy, DML-only transaction handling, so that
    # reads are repeatable and DDL is transactional (SQLAlchemy's documented recipe for pysqlite).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")  # wait for another writer instead of failing
    _into_wal(cursor)  # readers and one writer at once; persistent in the file
    cursor.execute("PRAGMA synchronous = NORMAL")  # with WAL: survives a crash of the app, and commits are fast
    cursor.execute("PRAGMA foreign_keys = ON")  # off by default in SQLite: ON DELETE CASCADE needs it
    cursor.close()
    # SQLite's lower() folds ASCII only; search lower-cases titles with it and must agree with Python's lower().
    dbapi_connection.create_function("lower", 1, _lower, deterministic=True)


def _into_wal(cursor: sqlite3.Cursor) -> None:
    """Switch the file to WAL (a no-op once it is). Switching takes an exclusive lock, and SQLite answers "database
    is locked" at once, without waiting the busy timeout, when another process is opening the new file at the same
    moment: try again until the busy timeout has passed."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _on_begin(connection: Connection) -> None:
    write = connection.get_execution_options().get("storage_write")
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
