"""Saved conversations, the API server's stored responses (responses.py), users' MCP sign-ins, encrypted
(mcp_tokens.py), and the Compare page's votes (compare_votes.py): the only code that talks to the database
(SQLAlchemy; SQLite by default, PostgreSQL by DEMO_DATABASE_URL; schema by Alembic migrations, applied when the
database is opened)."""

from __future__ import annotations

from app.storage.compare_votes import CompareVote, CompareVoteStore, VoteOutcome
from app.storage.database import open_database
from app.storage.errors import (
    ConversationNotFound,
    ImportRejected,
    StorageError,
    UnreadableConversation,
    VersionConflict,
)
from app.storage.records import ConversationSummary, ImportOutcome, StoredConversation
from app.storage.repository import ConversationStore
from app.storage.responses import (
    ResponseChainTooLarge,
    ResponseChainTooLong,
    ResponseNotFound,
    ResponseStore,
    StoredResponse,
)

__all__ = ["CompareVote", "CompareVoteStore", "ConversationNotFound", "ConversationStore", "ConversationSummary",
           "ImportOutcome", "ImportRejected", "ResponseChainTooLarge", "ResponseChainTooLong", "ResponseNotFound",
           "ResponseStore", "StorageError", "StoredConversation", "StoredResponse", "UnreadableConversation",
           "VersionConflict", "VoteOutcome", "default_store", "open_database"]


def default_store() -> ConversationStore:
    """A store on the configured database (DatabaseSettings), migrated. Each call opens a new engine: the caller
    keeps one per process."""
    return ConversationStore(open_database())
