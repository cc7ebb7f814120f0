"""FolderStore: each user's folders of conversations (table folders), and the tags a history filters by. A folder is
the owner's across the pages (a conversation of the Tools page and one of the Chat page may share one); a folder
deleted takes its conversations with it, or leaves them outside any folder, in one transaction.

Every method takes the owner first and only touches that owner's rows."""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.storage.database import rowcount
from app.storage.sessions import EngineStore
from app.storage.tables import ConversationRow as C
from app.storage.tables import FolderRow as F

MAX_FOLDERS = 100
MAX_FOLDER_NAME = 100
MAX_TAGS = 10  # on one conversation
MAX_TAG = 40


class FolderRefused(ValueError):
    """A folder request refused, with a message for the user: a name taken, too many folders, a missing folder."""


@dataclass(frozen=True)
class Folder:
    id: str
    name: str
    conversations: int  # the owner's conversations in it (of the page asked about, or of every page)
    every_page: int = 0  # of every page


class FolderStore(EngineStore):
    """Folders on one engine. Thread-safe; database failures raise StorageError."""

    def list(self, owner: str, page: str | None = None) -> builtins.list[Folder]:
        """The owner's folders by name, each with how many of their conversations (of `page`, if given) it holds,
        and how many of every page."""
        every = select(func.count(C.id)).where(C.folder_id == F.id, C.owner == owner)
        counted = every.where(C.page == page) if page is not None else every
        query = (select(F.id, F.name, counted.correlate(F).scalar_subquery(), every.correlate(F).scalar_subquery())
                 .where(F.owner == owner).order_by(func.lower(F.name), F.id))
        with self._reading() as session:
            return [Folder(*row) for row in session.execute(query)]

    def create(self, owner: str, name: str) -> Folder:
        name = folder_name(name)
        with self._writing() as session:
            if (session.scalar(select(func.count()).where(F.owner == owner)) or 0) >= MAX_FOLDERS:
                raise FolderRefused(f"You have {MAX_FOLDERS} folders, the most allowed: delete one first.")
            self._check_free(session, owner, name)
            row = F(id=str(uuid.uuid4()), owner=owner, name=name, created_at=datetime.now(UTC))
            session.add(row)
            try:
                session.flush()
            except IntegrityError as exc:  # made in another tab at the same moment
                raise FolderRefused(f"You have a folder named {name!r} already.") from exc
        return Folder(row.id, row.name, 0)

    def rename(self, owner: str, folder_id: str, name: str) -> None:
        name = folder_name(name)
        with self._writing() as session:
            self._check_free(session, owner, name, folder_id)
            try:
                if not rowcount(session.execute(update(F).where(F.owner == owner, F.id == folder_id)
                                                .values(name=name).execution_options(synchronize_session=False))):
                    raise FolderRefused("That folder does not exist (any more).")
                session.flush()
            except IntegrityError as exc:
                raise FolderRefused(f"You have a folder named {name!r} already.") from exc

    def delete(self, owner: str, folder_id: str, with_conversations: bool = False) -> int:
        """Delete the folder; its conversations are deleted too (`with_conversations`, with their messages) or
        left outside any folder. How many conversations were deleted or moved; FolderRefused when it is not
        there."""
        in_it = (C.owner == owner, C.folder_id == folder_id)
        with self._writing() as session:
            # The folder first: a move into it in another transaction then waits for this one and finds it gone
            # (ConversationStore.move locks the folder's row), instead of filing a conversation in a deleted folder.
            if not rowcount(session.execute(delete(F).where(F.owner == owner, F.id == folder_id)
                                            .execution_options(synchronize_session=False))):
                raise FolderRefused("That folder does not exist (any more).")
            if with_conversations:
                return rowcount(session.execute(delete(C).where(*in_it).execution_options(synchronize_session=False)))
            return rowcount(session.execute(update(C).where(*in_it).values(folder_id=None)
                                            .execution_options(synchronize_session=False)))

    @staticmethod
    def _check_free(session: Session, owner: str, name: str, other_than: str | None = None) -> None:
        query = select(F.id).where(F.owner == owner, func.lower(F.name) == name.lower())
        if other_than is not None:
            query = query.where(F.id != other_than)
        if session.scalar(query) is not None:
            raise FolderRefused(f"You have a folder named {name!r} already.")


def folder_name(name: str) -> str:
    """One printable line of 1 to 100 characters, or FolderRefused."""
    cleaned = " ".join("".join(c for c in str(name) if c.isprintable()).split())
    if not cleaned:
        raise FolderRefused("A folder needs a name.")
    if len(cleaned) > MAX_FOLDER_NAME:
        raise FolderRefused(f"A folder's name is at most {MAX_FOLDER_NAME} characters.")
    return cleaned


def clean_tags(tags: builtins.list[str]) -> builtins.list[str]:
    """Tags as they are kept: one printable lower-case word or phrase each, at most 40 characters, without
    repeats, at most 10; FolderRefused past those."""
    kept: builtins.list[str] = []
    for tag in tags:
        cleaned = " ".join("".join(c for c in str(tag) if c.isprintable()).split()).lower().lstrip("#")
        if not cleaned or cleaned in kept:
            continue
        if len(cleaned) > MAX_TAG:
            raise FolderRefused(f"A tag is at most {MAX_TAG} characters: {cleaned[:20]!r}... is longer.")
        kept.append(cleaned)
    if len(kept) > MAX_TAGS:
        raise FolderRefused(f"A conversation has at most {MAX_TAGS} tags.")
    return kept
