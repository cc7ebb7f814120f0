"""ConversationStore: every read and write of saved conversations. Each method takes the owner first and only
ever touches that owner's rows; another owner's conversation behaves exactly like a missing one."""

from __future__ import annotations

import builtins
import json
import logging
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    ColumnElement,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app.domain.conversation import Message
from app.storage import codec, transfer
from app.storage.database import rowcount
from app.storage.errors import (
    ConversationNotFound,
    UnreadableConversation,
    VersionConflict,
    database_errors,
)
from app.storage.folders import FolderRefused, clean_tags
from app.storage.records import ConversationSummary, ImportOutcome, StoredConversation
from app.storage.schema import PreferencesRecord, describe
from app.storage.sessions import EngineStore
from app.storage.tables import ConversationRow as C
from app.storage.tables import ConversationTagRow as T
from app.storage.tables import FolderRow as F
from app.storage.tables import MessageRow as M
from app.storage.tables import PreferencesRow as P

log = logging.getLogger(__name__)
MAX_LIST_LIMIT = 500
ALL_FOLDERS = "*"  # list(): conversations in any folder or none


class ConversationStore(EngineStore):
    """Saved conversations on one engine (app.storage.database.open_database). Thread-safe: it keeps no state but
    the engine's connection pool. Database failures raise StorageError."""

    # ----- conversations ----------------------------------------------------------------------------------------

    def create(self, owner: str, page: str, title: str = "", settings: dict[str, Any] | None = None) -> str:
        """A new, empty conversation (version 1); returns its id."""
        _check_owner(owner)
        _check_page(page)
        now = _now()
        row = C(id=str(uuid.uuid4()), owner=owner, page=page, title=codec.clean_title(title),
                settings=_json_object(settings or {}), version=1, message_count=0, created_at=now, updated_at=now)
        with self._writing() as session:
            session.add(row)
        return row.id

    def list(self, owner: str, page: str | None = None, search: str = "", limit: int = 50,
             offset: int = 0, folder: str | None = ALL_FOLDERS, tag: str = "") -> builtins.list[ConversationSummary]:
        """The owner's conversations, pinned ones first, then newest first (updated_at), optionally of one page
        only. `search` keeps those whose title or a shown message's text contains it, ignoring case; % and _ match
        themselves. `folder`: a folder's id, None for those in no folder, ALL_FOLDERS for all; `tag`: only those
        with this tag."""
        if not 1 <= limit <= MAX_LIST_LIMIT or offset < 0:
            raise ValueError(f"limit must be 1..{MAX_LIST_LIMIT} and offset >= 0")
        query = select(C.id, C.title, C.page, C.updated_at, _shown_count(), C.pinned, C.folder_id).where(
            C.owner == owner)
        if page is not None:
            query = query.where(C.page == page)
        if folder != ALL_FOLDERS:  # "in no folder" also takes one whose folder went (a database edited by hand)
            query = query.where(or_(C.folder_id.is_(None), ~exists().where(F.id == C.folder_id)) if folder is None
                                else C.folder_id == folder)
        if tag:
            query = query.where(exists().where(T.conversation_id == C.id, T.tag == tag))
        if term := search.strip().lower().replace("\x00", ""):  # as codec.search_text stores it
            in_messages = exists().where(M.conversation_id == C.id, M.deleted == false(),
                                         M.search_text.contains(term, autoescape=True))
            query = query.where(or_(func.lower(C.title).contains(term, autoescape=True), in_messages))
        query = query.order_by(C.pinned.desc(), C.updated_at.desc(), C.id.desc()).limit(limit).offset(offset)
        with self._reading() as session:
            rows = session.execute(query).all()
            tags: dict[str, builtins.list[str]] = {}
            if rows:
                for conversation_id, name in session.execute(
                        select(T.conversation_id, T.tag).where(T.conversation_id.in_([row[0] for row in rows]))
                        .order_by(T.tag)):
                    tags.setdefault(conversation_id, []).append(name)
        return [ConversationSummary(*row[:5], pinned=bool(row[5]), folder_id=row[6], tags=tuple(tags.get(row[0], ())))
                for row in rows]

    def get(self, owner: str, id: str, with_messages: bool = True) -> StoredConversation:
        """The conversation and its shown messages in order (none when with_messages is False, which is cheaper:
        for a title or a version). UnreadableConversation if a message is not in the stored shape."""
        with self._reading() as session:
            row = self._row(session, owner, id)
            if with_messages:
                payloads = session.scalars(select(M.payload).where(M.conversation_id == id, M.deleted == false())
                                           .order_by(M.seq)).all()
                count = len(payloads)
            else:
                payloads, count = [], session.scalar(select(_shown_count()).where(C.id == id)) or 0
        stored = StoredConversation(row.id, row.owner, row.page, row.title, row.settings, row.version, row.created_at,
                                    row.updated_at, count, [])
        for index, payload in enumerate(payloads):
            try:
                stored.messages.append(codec.decode_message_json(payload))
            except ValidationError as exc:
                raise UnreadableConversation(replace(stored, messages=[]),
                                             describe(exc, f"messages[{index}]")) from None
        return stored

    def rename(self, owner: str, id: str, title: str, expected_version: int) -> int:
        """Set the title (one line, cut to 200 characters); returns the new version. VersionConflict if the
        conversation is no longer at expected_version."""
        with self._writing() as session:
            return self._bump_version(session, owner, id, expected_version, title=codec.clean_title(title))

    def update_settings(self, owner: str, id: str, settings: dict[str, Any]) -> None:
        """Replace the conversation's settings. Last writer wins, and neither version nor updated_at changes: a
        slider moved in one tab must not make another tab's edit fail, nor reorder the history."""
        values = _json_object(settings)
        with self._writing() as session:
            if rowcount(session.execute(update(C).where(C.id == id, C.owner == owner).values(settings=values)
                                         .execution_options(synchronize_session=False))) == 0:
                raise ConversationNotFound(id)

    def delete(self, owner: str, id: str) -> None:
        """Delete the conversation and its messages for good."""
        with self._writing() as session:
            if rowcount(session.execute(delete(C).where(C.id == id, C.owner == owner)
                                         .execution_options(synchronize_session=False))) == 0:
                raise ConversationNotFound(id)

    # ----- organising the history ---------------------------------------------------------------------------------
    # None of these moves the version or updated_at: organising a conversation does not reorder the history, nor
    # make another tab's edit of it fail.

    def set_pinned(self, owner: str, id: str, pinned: bool) -> None:
        self._set(owner, id, pinned=bool(pinned))

    def move(self, owner: str, id: str, folder_id: str | None) -> None:
        """Put the conversation in the owner's folder (None: in no folder). FolderRefused for a folder that is not
        theirs."""
        with self._writing() as session:
            # Locked (shared) until the move commits: a deletion of the folder waits for it, then moves it out.
            if folder_id is not None and session.scalar(
                    select(F.id).where(F.owner == owner, F.id == folder_id).with_for_update(read=True)) is None:
                raise FolderRefused("That folder does not exist (any more).")
            self._set_in(session, owner, id, folder_id=folder_id)

    def set_tags(self, owner: str, id: str, tags: builtins.list[str]) -> builtins.list[str]:
        """Replace the conversation's tags (folders.clean_tags: lower case, no repeats, at most 10); the tags kept."""
        kept = clean_tags(tags)
        with self._writing() as session:
            self._row(session, owner, id)
            session.execute(delete(T).where(T.conversation_id == id))
            if kept:
                session.execute(insert(T), [{"conversation_id": id, "tag": tag} for tag in kept])
        return kept

    def tags(self, owner: str, page: str | None = None) -> builtins.list[tuple[str, int]]:
        """The owner's tags with how many of their conversations (of `page`, if given) carry each, by name."""
        query = select(T.tag, func.count()).join(C, C.id == T.conversation_id).where(C.owner == owner)
        if page is not None:
            query = query.where(C.page == page)
        with self._reading() as session:
            return [(tag, int(count)) for tag, count in session.execute(query.group_by(T.tag).order_by(T.tag))]

    def _set(self, owner: str, id: str, **values: Any) -> None:
        with self._writing() as session:
            self._set_in(session, owner, id, **values)

    @staticmethod
    def _set_in(session: Session, owner: str, id: str, **values: Any) -> None:
        if rowcount(session.execute(update(C).where(C.id == id, C.owner == owner).values(**values)
                                    .execution_options(synchronize_session=False))) == 0:
            raise ConversationNotFound(id)

    # ----- messages ---------------------------------------------------------------------------------------------

    def append(self, owner: str, id: str, message: Message) -> int:
        """Add a message at the end; returns its seq. Appends from many threads or processes are serialised by the
        conversation's row (each gets the next seq), so none is lost. The first user message with text titles an
        untitled conversation. The version does not change."""
        payload, text, now = codec.encode_message_json(message), codec.search_text(message), _now()
        values: dict[str, Any] = {"message_count": C.message_count + 1, "updated_at": now}
        if message.role == "user" and (title := codec.title_from(message)):
            values["title"] = case((C.title == "", title), else_=C.title)
        with self._writing() as session:
            count = session.execute(update(C).where(C.id == id, C.owner == owner).values(values)
                                    .returning(C.message_count)
                                    .execution_options(synchronize_session=False)).scalar_one_or_none()
            if count is None:
                raise ConversationNotFound(id)
            session.execute(insert(M).values(conversation_id=id, seq=count - 1, deleted=False, search_text=text,
                                             payload=payload, created_at=now))
        return count - 1

    def truncate(self, owner: str, id: str, keep: int, expected_version: int,
                 expected_count: int | None = None) -> int:
        """Keep the first `keep` shown messages and delete the rest (a Regenerate, an edit, a version switch: what
        is dropped lives on in the versions of the message that replaces it, so keeping the rows too would store
        every switch twice, pictures included);
        returns the new version. VersionConflict if the conversation is no longer at expected_version, or, given
        `expected_count`, no longer has that many shown messages: appends do not move the version, and a caller
        that has not seen another tab's messages must not delete them."""
        if keep < 0:
            raise ValueError("keep must be >= 0")
        with self._writing() as session:
            version = self._bump_version(session, owner, id, expected_version)
            shown = M.conversation_id == id, M.deleted == false()
            if expected_count is not None:
                count = session.scalar(select(func.count(M.seq)).where(*shown)) or 0
                if count != expected_count:
                    raise VersionConflict(id, expected_version, version)  # rolled back with the transaction
            first_dropped = session.scalar(select(M.seq).where(*shown).order_by(M.seq).offset(keep).limit(1))
            if first_dropped is not None:
                session.execute(delete(M).where(*shown, M.seq >= first_dropped)
                                .execution_options(synchronize_session=False))
        return version

    def replace_messages(self, owner: str, id: str, changes: Mapping[int, Message], expected_version: int,
                         expected_count: int) -> int:
        """Rewrite shown messages in place (`changes`: index among the shown messages -> the message now there):
        a thumbs up on an early answer of a long conversation rewrites that one row, not all that follow it.
        Returns the new version; VersionConflict as truncate's, the conversation having to hold `expected_count`
        shown messages."""
        with self._writing() as session:
            seqs = session.scalars(select(M.seq).where(M.conversation_id == id, M.deleted == false())
                                   .order_by(M.seq)).all()
            places = {index: seqs[index] for index in changes if 0 <= index < len(seqs)}
            before = dict(session.execute(select(M.seq, M.payload).where(
                M.conversation_id == id, M.seq.in_(list(places.values())))).all())
            rated_only = len(places) == len(changes) and all(
                _without_feedback(before[places[index]]) == _without_feedback(codec.encode_message_json(message))
                for index, message in changes.items())
            # A rating is no edit: the conversation keeps its place in the history (updated_at), as with a pin.
            version = self._bump_version(session, owner, id, expected_version, touch=not rated_only)
            if len(seqs) != expected_count or any(not 0 <= index < len(seqs) for index in changes):
                raise VersionConflict(id, expected_version, version)  # rolled back with the transaction
            for index, message in changes.items():
                session.execute(update(M).where(M.conversation_id == id, M.seq == seqs[index])
                                .values(payload=codec.encode_message_json(message),
                                        search_text=codec.search_text(message))
                                .execution_options(synchronize_session=False))
        return version

    # ----- files ------------------------------------------------------------------------------------------------

    def export_json(self, owner: str, id: str) -> dict[str, Any]:
        """The conversation as a JSON-able dict; the format is documented in app/storage/transfer.py. One with an
        unreadable message is exported with its stored records as they are (`metadata`, no `messages`), to look at
        or mend: the import refuses it until then."""
        try:
            return transfer.export_document(self.get(owner, id))
        except UnreadableConversation as exc:
            with self._reading() as session:
                payloads = session.scalars(select(M.payload).where(M.conversation_id == id, M.deleted == false())
                                           .order_by(M.seq)).all()
            return {**transfer.export_document(exc.stored), "metadata": [_as_json(p) for p in payloads]}

    def export_markdown(self, owner: str, id: str) -> str:
        stored = self.get(owner, id)
        return codec.conversation_to_markdown(stored.title, stored.messages)

    def import_json(self, owner: str, raw: bytes, page: str | None = None) -> str:
        """import_file, returning only the new conversation's id."""
        return self.import_file(owner, raw, page).id

    def import_file(self, owner: str, raw: bytes, page: str | None = None) -> ImportOutcome:
        """A new conversation of the owner's from an export_json file (JSON bytes, at most 50 MB, at most 10,000
        messages), on `page` if given (the page it is imported on) else the file's: its id, and the tools whose
        run-without-asking the file's settings asked for and did not get (transfer.py).
        ImportRejected says what is wrong and where; nothing is created then, nor if the database fails half-way
        (one transaction)."""
        _check_owner(owner)
        imported = transfer.parse_import(raw)
        now, conversation_id = _now(), str(uuid.uuid4())
        rows = [{"conversation_id": conversation_id, "seq": seq, "deleted": False, "created_at": now,
                 "search_text": codec.search_text(message), "payload": codec.encode_message_json(message)}
                for seq, message in enumerate(imported.messages)]
        with self._writing() as session:
            session.add(C(id=conversation_id, owner=owner, page=page or imported.page,
                          title=codec.clean_title(imported.title), settings=imported.settings, version=1,
                          message_count=len(rows), created_at=imported.created_at or now, updated_at=now))
            session.flush()  # the conversation before its messages (foreign key)
            if rows:
                session.execute(insert(M), rows)
        return ImportOutcome(conversation_id, imported.not_granted)

    # ----- preferences ------------------------------------------------------------------------------------------

    def get_preferences(self, owner: str) -> dict[str, Any]:
        """The owner's last settings (app/storage/schema.py, PreferencesRecord): only the keys that were set, each
        valid (one stored by an older version that is no longer valid is left out, and logged); {} when none were
        saved."""
        _check_owner(owner)
        with self._reading() as session:
            stored = session.scalar(select(P.settings).where(P.owner == owner))
        if stored is None:
            return {}
        usable, problems = PreferencesRecord.usable(stored)
        if problems:
            log.warning("stored preferences left out: %s", "; ".join(problems))
        return usable

    def set_preferences(self, owner: str, settings: dict[str, Any]) -> None:
        """Save `settings` as the owner's last settings, in place of those saved before (one row per owner, written
        in one statement: last writer wins). Validated by PreferencesRecord.usable: unknown keys and values of the
        wrong type or out of range are dropped, and logged with their names; the rest is saved."""
        _check_owner(owner)
        if not isinstance(settings, dict):
            raise ValueError("settings must be a dict")
        usable, problems = PreferencesRecord.usable(settings)
        if problems:
            log.warning("preferences not saved: %s", "; ".join(problems))
        dialect = sqlite if self.engine.dialect.name == "sqlite" else postgresql
        statement = dialect.insert(P).values(owner=owner, settings=_json_object(usable), updated_at=_now())
        statement = statement.on_conflict_do_update(
            index_elements=[P.owner],
            set_={"settings": statement.excluded.settings, "updated_at": statement.excluded.updated_at})
        with self._writing() as session:
            session.execute(statement)

    # ----- helpers ----------------------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Session]:
        """One snapshot for all reads inside: a conversation's row and its messages agree. (SQLite's transactions
        are snapshots already; PostgreSQL's default, READ COMMITTED, takes one per statement.)"""
        with database_errors(), self._sessions() as session:
            if self.engine.dialect.name == "postgresql":
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield session

    @staticmethod
    def _row(session: Session, owner: str, id: str) -> C:
        row = session.scalar(select(C).where(C.id == id, C.owner == owner))
        if row is None:
            raise ConversationNotFound(id)
        return row

    @staticmethod
    def _bump_version(session: Session, owner: str, id: str, expected: int, touch: bool = True,
                      **values: Any) -> int:
        """Compare-and-set in one statement: the version goes up only if it still is `expected`. `touch`: the
        conversation counts as changed now (updated_at, its place in the history)."""
        if touch:
            values["updated_at"] = _now()
        version = session.execute(
            update(C).where(C.id == id, C.owner == owner, C.version == expected)
            .values(version=C.version + 1, **values).returning(C.version)
            .execution_options(synchronize_session=False)).scalar_one_or_none()
        if version is not None:
            return version
        actual = session.scalar(select(C.version).where(C.id == id, C.owner == owner))
        if actual is None:
            raise ConversationNotFound(id)
        raise VersionConflict(id, expected, actual)


def _without_feedback(payload: str) -> Any:
    """A stored message's record without its feedback (what a rating leaves unchanged)."""
    record = _as_json(payload)
    if isinstance(record, dict):
        record.pop("feedback", None)
    return record


def _as_json(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError:  # not even JSON: the text itself
        return payload



def _shown_count() -> ColumnElement[int]:
    """The number of shown messages of the conversation in the enclosing query."""
    return (select(func.count(M.seq)).where(M.conversation_id == C.id, M.deleted == false())
            .correlate(C).scalar_subquery())




def _now() -> datetime:
    return datetime.now(UTC)


def _check_owner(owner: str) -> None:
    if not 0 < len(owner) <= 200:
        raise ValueError("owner must be 1 to 200 characters")


def _check_page(page: str) -> None:
    if not 0 < len(page) <= 64:
        raise ValueError("page must be 1 to 64 characters")


def _json_object(settings: Any) -> dict[str, Any]:
    """Settings as they will be stored: a JSON object (checked here, so that a bad value fails clearly, before the
    database sees it)."""
    if not isinstance(settings, dict):
        raise ValueError("settings must be a dict")
    try:
        stored: dict[str, Any] = json.loads(json.dumps(settings, allow_nan=False))
        return stored
    except (TypeError, ValueError) as exc:
        raise ValueError(f"settings must be JSON-serialisable: {exc}") from exc
