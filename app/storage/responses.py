"""ResponseStore: the API server's stored responses (OpenAI's Responses API: `store=true`, `previous_response_id`,
GET and DELETE /v1/responses/{id}, its input_items), in the conversation database (table api_responses).

Each method takes the owner first and only ever touches that owner's rows; another owner's response behaves exactly
like a missing one. A response is kept ResponseStoreSettings.retention_days after its created_at: older ones are
invisible at once and deleted by purge_expired, which save also runs now and then. Each row records its JSON's size
in bytes: a chain is sized from those before any body is loaded, and the store as a whole is held under its count and
bytes limits by deleting the oldest responses (of any owner) as new ones are saved."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import ColumnElement, Engine, delete, false, func, insert, literal_column, or_, select, true

from app.config import ResponseStoreSettings
from app.storage.database import _json_dumps, rowcount
from app.storage.errors import StorageError
from app.storage.sessions import EngineStore
from app.storage.tables import ApiResponseRow as R

log = logging.getLogger(__name__)
PURGE_INTERVAL_S = 60.0  # save purges expired responses at most this often per store
MAX_INPUT_ITEMS_LIMIT = 100  # OpenAI's largest page of input items
MAX_ID_CHARS = 100  # the id columns' length


class ResponseNotFound(StorageError):
    """No such response for this owner: missing, deleted, expired or another owner's (which is not revealed).
    `response_id` is the one not found: the one asked for, or a link of its chain."""

    def __init__(self, response_id: str) -> None:
        super().__init__(f"response {response_id!r} not found")
        self.response_id = response_id


class ResponseChainTooLong(StorageError):
    """The chain of previous responses is longer than ResponseStoreSettings.max_chain."""

    def __init__(self, response_id: str, max_chain: int) -> None:
        super().__init__(f"the chain of previous responses ending at {response_id!r} is longer than {max_chain} "
                         "responses (DEMO_RESPONSES_MAX_CHAIN): start a new conversation")
        self.response_id = response_id
        self.max_chain = max_chain


class ResponseChainTooLarge(StorageError):
    """The chain of previous responses holds more stored JSON than ResponseStoreSettings.max_chain_mb."""

    def __init__(self, response_id: str, size: int, max_bytes: int) -> None:
        super().__init__(f"the chain of previous responses ending at {response_id!r} holds {size / 2**20:.1f} MB, "
                         f"more than {max_bytes / 2**20:.1f} MB (DEMO_RESPONSES_MAX_CHAIN_MB): start a new "
                         "conversation, or send less in each turn")
        self.response_id, self.size, self.max_bytes = response_id, size, max_bytes


@dataclass(frozen=True)
class StoredResponse:
    id: str  # "resp_..."
    owner: str
    created_at: datetime  # aware, UTC
    previous_response_id: str | None
    input_items: list[dict[str, Any]]  # this request's own input items, as JSON (each has an "id")
    response: dict[str, Any]  # the whole Response object as JSON


class ResponseStore(EngineStore):
    """Stored responses on one engine (app.storage.database.open_database). Thread-safe: its only state besides the
    engine's connection pool is when it last purged, behind a lock. Database failures raise StorageError."""

    def __init__(self, engine: Engine, settings: ResponseStoreSettings | None = None) -> None:
        super().__init__(engine)  # each read is one statement, which sees one snapshot: no REPEATABLE READ needed
        self.settings = settings if settings is not None else ResponseStoreSettings.from_env()
        self._purge_lock = threading.Lock()
        self._next_purge = -math.inf  # time.monotonic() of the next purge save may run: the first save purges

    @property
    def enabled(self) -> bool:
        """False when the retention is 0: save stores nothing and nothing stored earlier can be read."""
        return self.settings.retention_days > 0

    def save(self, owner: str, response: dict[str, Any], input_items: list[dict[str, Any]],
             previous_response_id: str | None) -> None:
        """Store `response` (its "id" and "created_at", unix seconds, are the row's) with the request's own input
        items; nothing when the store is not enabled. Then, if the store holds more responses or bytes than its
        limits, the oldest go. ValueError if the response has no string id or numeric created_at, an input item is
        not an object with a string "id", something is not JSON (NaN included), or it alone is larger than the
        whole store may be; StorageError if the database fails, or a response with this id is already stored."""
        if not self.enabled:
            return
        if not isinstance(owner, str) or len(owner) > 200:
            raise ValueError("owner must be a string of at most 200 characters")
        if previous_response_id is not None:
            _check_id(previous_response_id, "previous_response_id")
        if not isinstance(response, dict):
            raise ValueError("response must be a dict")
        _check_id(response.get("id"), 'response["id"]')
        if not isinstance(input_items, list) or not all(
                isinstance(item, dict) and isinstance(item.get("id"), str) for item in input_items):
            raise ValueError('input_items must be a list of dicts, each with a string "id"')
        size = 0
        for name, value in (("response", response), ("input_items", input_items)):
            try:  # here, not in the database driver, so that the caller gets a plain ValueError
                size += len(_json_dumps(value).encode())  # as the engine serialises it
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name} must be JSON-serialisable: {exc}") from exc
        if size > self.settings.max_total_bytes:
            raise ValueError(f"the response and its input take {size} bytes, more than the whole store may hold "
                             f"({self.settings.max_total_bytes}, DEMO_RESPONSES_MAX_STORE_MB)")
        row = {"id": response["id"], "owner": owner, "created_at": _created_at(response),
               "previous_response_id": previous_response_id, "size": size, "input_items": input_items,
               "response": response}
        with self._writing() as session:
            session.execute(insert(R).values(row))
        self._evict_if_over()
        self._purge_if_due()

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        """The response, or None if it is missing, expired or another owner's."""
        with self._reading() as session:
            row = session.scalar(select(R).where(R.id == response_id, *self._visible(owner)))
        if row is None:
            return None
        return StoredResponse(row.id, row.owner, row.created_at, row.previous_response_id, row.input_items,
                              row.response)

    def delete(self, owner: str, response_id: str) -> bool:
        """Delete the response for good; False when there was none of this owner's to delete (an expired one is
        left to the purge). The responses that continued it stay readable, but their history now raises
        ResponseNotFound."""
        with self._writing() as session:
            result = session.execute(delete(R).where(R.id == response_id, *self._visible(owner))
                                     .execution_options(synchronize_session=False))
            return rowcount(result) > 0

    def history(self, owner: str, response_id: str) -> list[dict[str, Any]]:
        """What a follow-up with previous_response_id=response_id continues from: for each response of the chain
        that ends at it, oldest first, its input items then its response's "output" items. The chain is walked on
        the rows' metadata first (a recursive CTE, at most max_chain + 1 levels deep) and sized from their recorded
        sizes; only a chain within the limits has its bodies loaded. ResponseNotFound if the response or any earlier
        link is missing, expired or another owner's; ResponseChainTooLong if the chain holds more than max_chain
        responses, ResponseChainTooLarge if more than max_chain_mb of JSON."""
        limit = self.settings.max_chain
        visible = self._visible(owner)
        start = (select(R.id, R.previous_response_id, R.size, literal_column("1").label("depth"))
                 .where(R.id == response_id, *visible).cte("chain", recursive=True))
        # Links deeper than the limit are not followed: one level past it is enough to know the chain is too long
        # (and a cycle, which saving never makes, ends there too).
        chain = start.union_all(
            select(R.id, R.previous_response_id, R.size, start.c.depth + 1)
            .join(start, R.id == start.c.previous_response_id)
            .where(start.c.depth <= limit, *visible))
        with self._reading() as session:
            links = session.execute(select(chain.c.id, chain.c.previous_response_id, chain.c.size, chain.c.depth)
                                    .order_by(chain.c.depth.desc())).all()
        if not links:
            raise ResponseNotFound(response_id)
        oldest = links[0]
        if oldest.depth > limit:
            raise ResponseChainTooLong(response_id, limit)
        if oldest.previous_response_id is not None:
            raise ResponseNotFound(oldest.previous_response_id)
        size = sum(link.size for link in links)
        if size > self.settings.max_chain_bytes:
            raise ResponseChainTooLarge(response_id, size, self.settings.max_chain_bytes)
        with self._reading() as session:
            bodies = {row.id: row for row in session.execute(
                select(R.id, R.input_items, R.response).where(R.id.in_([link.id for link in links]), *visible))}
        items: list[dict[str, Any]] = []
        for link in links:
            row = bodies.get(link.id)
            if row is None:  # deleted (or expired) between the two reads
                raise ResponseNotFound(link.id)
            items.extend(row.input_items)
            items.extend(row.response.get("output") or [])
        return items

    def input_items(self, owner: str, response_id: str, after: str | None = None, limit: int = 20,
                    order: Literal["asc", "desc"] = "desc") -> tuple[list[dict[str, Any]], bool] | None:
        """A page of the response's own input items as OpenAI lists them: in `order` (asc: as sent), those after
        the item whose id is `after` (none if no item has that id), at most `limit` (1 to 100); and whether more
        follow. None if the response is missing, expired or another owner's."""
        if not 1 <= limit <= MAX_INPUT_ITEMS_LIMIT:
            raise ValueError(f"limit must be 1..{MAX_INPUT_ITEMS_LIMIT}")
        if order not in ("asc", "desc"):
            raise ValueError("order must be 'asc' or 'desc'")
        with self._reading() as session:
            stored = session.scalar(select(R.input_items).where(R.id == response_id, *self._visible(owner)))
        if stored is None:
            return None
        items = stored if order == "asc" else stored[::-1]
        start = 0
        if after is not None:
            found = next((index for index, item in enumerate(items) if item.get("id") == after), None)
            if found is None:
                return [], False
            start = found + 1
        return items[start:start + limit], start + limit < len(items)

    def purge_expired(self) -> int:
        """Delete the responses older than the retention (every one when the store is not enabled), of every
        owner; returns how many."""
        with self._writing() as session:
            return rowcount(session.execute(delete(R).where(self._expired())
                                             .execution_options(synchronize_session=False)))

    # ----- helpers ----------------------------------------------------------------------------------------------

    def _cutoff(self) -> datetime | None:
        """The oldest created_at still kept; None when the retention reaches back before year 1 (nothing expires)."""
        try:
            return datetime.now(UTC) - timedelta(days=self.settings.retention_days)
        except OverflowError:
            return None

    def _visible(self, owner: str) -> list[ColumnElement[bool]]:
        """Conditions on a row that the owner can see: theirs, and not expired."""
        if not self.enabled:
            return [false()]
        cutoff = self._cutoff()
        return [R.owner == owner] + ([R.created_at >= cutoff] if cutoff is not None else [])

    def _expired(self) -> ColumnElement[bool]:
        if not self.enabled:
            return true()
        cutoff = self._cutoff()
        return R.created_at < cutoff if cutoff is not None else false()

    def _evict_if_over(self) -> None:
        """Delete the oldest responses, whoever's, while the store holds more than max_responses or
        max_total_bytes: a store that clients fill cannot grow without bound. A failure is logged (the response
        was saved); the next save tries again."""
        settings = self.settings
        try:
            with self._reading() as session:
                count, total = session.execute(select(func.count(), func.coalesce(func.sum(R.size), 0))).one()
            if count <= settings.max_responses and total <= settings.max_total_bytes:
                return
            newest_first = (R.created_at.desc(), R.id.desc())
            running = select(R.id, func.row_number().over(order_by=newest_first).label("n"),
                             func.sum(R.size).over(order_by=newest_first).label("bytes")).subquery()
            doomed = select(running.c.id).where(or_(running.c.n > settings.max_responses,
                                                    running.c.bytes > settings.max_total_bytes))
            with self._writing() as session:
                evicted = rowcount(session.execute(delete(R).where(R.id.in_(doomed))
                                                   .execution_options(synchronize_session=False)))
        except StorageError as exc:
            log.warning("the response store was not trimmed to its limits: %s", exc)
            return
        if evicted:
            log.info("deleted the %d oldest stored responses: the store is kept under %d responses and %d bytes",
                     evicted, settings.max_responses, settings.max_total_bytes)

    def _purge_if_due(self) -> None:
        """Purge unless this store did within PURGE_INTERVAL_S. The response was saved already: a failed purge is
        logged, not raised, and the next one is due an interval later."""
        now = time.monotonic()
        with self._purge_lock:
            if now < self._next_purge:
                return
            self._next_purge = now + PURGE_INTERVAL_S  # claimed before the purge: other threads skip it
        try:
            purged = self.purge_expired()
        except StorageError as exc:
            log.warning("expired responses not purged: %s", exc)
            return
        if purged:
            log.info("purged %d expired responses", purged)



def _check_id(value: Any, name: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ValueError(f"{name} must be a string of 1 to {MAX_ID_CHARS} characters")


def _created_at(response: dict[str, Any]) -> datetime:
    value = response.get("created_at")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError('response["created_at"] must be unix seconds')
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f'response["created_at"] is not a usable time: {exc}') from exc



