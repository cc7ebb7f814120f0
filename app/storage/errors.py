"""What the store raises. Every failure a caller should handle is a StorageError; database driver errors are
wrapped in one too, so a page can show "not saved" without knowing SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import SQLAlchemyError

from app.storage.records import StoredConversation


class StorageError(Exception):
    """The store could not do what was asked (the database is unreachable, locked for too long, ...)."""


class ConversationNotFound(StorageError):
    """No such conversation for this owner. Another owner's conversation raises this too: its existence is not
    revealed."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"conversation {conversation_id!r} not found")
        self.conversation_id = conversation_id


class UnreadableConversation(StorageError):
    """A stored message is not in the stored shape (written by an older or foreign version, or by hand): the
    conversation is kept and can still be renamed or deleted, but not read. `stored` is it without its messages."""

    def __init__(self, stored: StoredConversation, problem: str) -> None:
        super().__init__(problem)
        self.stored = stored


class VersionConflict(StorageError):
    """The conversation was edited (truncated, renamed) since the caller read `expected`; it is now `actual`."""

    def __init__(self, conversation_id: str, expected: int, actual: int) -> None:
        super().__init__(f"conversation {conversation_id!r} changed elsewhere (version {actual}, expected {expected})")
        self.conversation_id = conversation_id
        self.expected = expected
        self.actual = actual


class ImportRejected(StorageError):
    """An imported file is not a conversation export; the message says what is wrong and where."""


@contextmanager
def database_errors() -> Iterator[None]:
    """Database driver errors inside, as StorageError."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise StorageError(f"database error: {getattr(exc, 'orig', None) or exc}") from exc
