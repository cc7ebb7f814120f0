"""What every store on one engine shares: its session factory, and the two ways it uses a session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.storage.errors import database_errors
from app.storage.sqlite import WRITE


class EngineStore:
    """A store on one engine (app.storage.database.open_database). Thread-safe: it keeps no state but the engine's
    connection pool. Database failures raise StorageError."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        with database_errors(), self._sessions() as session:
            yield session

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """One transaction, committed at the end, rolled back on any exception; on SQLite it takes the write lock
        first (BEGIN IMMEDIATE, app/storage/sqlite.py)."""
        with database_errors(), self._sessions.begin() as session:
            session.connection(execution_options=WRITE)
            yield session
