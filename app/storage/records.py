"""What the store hands out: a history entry and a read conversation. Their own module, below the repository, so
that the modules the repository uses (transfer, errors) can name them without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.domain.conversation import Message


@dataclass(frozen=True)
class ConversationSummary:
    """One history entry. message_count counts the messages shown (not those a truncation removed)."""

    id: str
    title: str
    page: str
    updated_at: datetime
    message_count: int
    pinned: bool = False
    folder_id: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredConversation:
    id: str
    owner: str
    page: str
    title: str
    settings: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    message_count: int  # the messages shown; len(messages) when they were read
    messages: list[Message]  # in order, without truncated ones; empty when read with with_messages=False


@dataclass(frozen=True)
class ImportOutcome:
    """A conversation imported from a file: its id, and the tools the file asked to run without asking, which keep
    their defaults (an import carries preferences, never permissions)."""

    id: str
    not_granted: list[str]
