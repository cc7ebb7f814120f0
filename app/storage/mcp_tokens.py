"""McpTokenStore: each user's sign-ins to MCP servers (the OAuth tokens, and the client the app registered with the
server's authorization server), in the conversation database (table mcp_tokens), encrypted with a key from the
environment (DEMO_SECRET_KEY, a Fernet key).

A row is keyed by its owner and the SHA-256 of the server's URL; each value is one Fernet token (AES and an HMAC)
of JSON that also names the owner and the URL, so a value copied to another row (by whoever can write to the
database) is refused, not used. A value that cannot be decrypted (the key changed) reads as absent: the user signs
in again. Values are never logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from app.storage.database import rowcount
from app.storage.errors import StorageError, database_errors
from app.storage.sessions import EngineStore
from app.storage.tables import McpTokenRow as T

log = logging.getLogger(__name__)
Kind = Literal["tokens", "client_info"]
KEY_HELP = ('make one with `python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"` '
            "and set it in the environment of every app process")


class SecretKeyError(ValueError):
    """DEMO_SECRET_KEY is missing or is not a Fernet key; the message says how to make one."""


def cipher(secret_key: str) -> Fernet:
    """The Fernet of `secret_key`; SecretKeyError when there is none or it is not a Fernet key."""
    if not secret_key:
        raise SecretKeyError(f"signing in to MCP servers needs DEMO_SECRET_KEY, which encrypts the tokens: {KEY_HELP}.")
    try:
        return Fernet(secret_key.encode())
    except (ValueError, TypeError):
        raise SecretKeyError(f"DEMO_SECRET_KEY is not a Fernet key (32 bytes in url-safe base64): {KEY_HELP}.") \
            from None


def server_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


class McpTokenStore(EngineStore):
    """Sign-ins on one engine (app.storage.database.open_database), encrypted with one key. Thread-safe (it keeps no
    state besides the engine's pool). Database failures raise StorageError."""

    def __init__(self, engine: Engine, secret_key: str) -> None:
        """SecretKeyError when `secret_key` is not a usable Fernet key."""
        self._fernet = cipher(secret_key)
        super().__init__(engine)

    def get(self, owner: str, url: str, kind: Kind) -> dict[str, Any] | None:
        """The stored value of `kind` for `owner` at the server `url`, or None (nothing stored, or not readable with
        this key)."""
        with database_errors(), self._sessions() as session:
            row = session.get(T, (owner, server_key(url)))
        sealed = None if row is None else getattr(row, kind)
        if sealed is None:
            return None
        try:
            opened = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError):
            log.warning("A stored MCP sign-in could not be decrypted (was DEMO_SECRET_KEY changed?); the user signs "
                        "in again.")
            return None
        if not isinstance(opened, dict) or opened.get("owner") != owner or opened.get("url") != url \
                or opened.get("kind") != kind or not isinstance(opened.get("value"), dict):
            log.warning("A stored MCP sign-in belongs to another row and was ignored.")
            return None
        value: dict[str, Any] = opened["value"]
        return value

    def put(self, owner: str, url: str, kind: Kind, value: dict[str, Any]) -> None:
        """Store `value` (JSON) as `kind` for `owner` at `url`, encrypted, replacing what was there."""
        sealed = self._fernet.encrypt(json.dumps({"owner": owner, "url": url, "kind": kind, "value": value}).encode())
        values = {kind: sealed.decode(), "updated_at": datetime.now(UTC)}
        key = (T.owner == owner, T.server == server_key(url))
        for attempt in range(2):
            try:
                with self._writing() as session:
                    if rowcount(session.execute(update(T).where(*key).values(values)
                                                .execution_options(synchronize_session=False))) == 0:
                        session.execute(insert(T).values(owner=owner, server=server_key(url), **values))
                return
            except StorageError as exc:
                # Two first writes at once (PostgreSQL): the other inserted the row; update it now.
                if attempt or not isinstance(exc.__cause__, IntegrityError):
                    raise

    def forget(self, owner: str, url: str) -> bool:
        """Delete `owner`'s sign-in to `url` (tokens and registered client); False when there was none."""
        with self._writing() as session:
            return rowcount(session.execute(delete(T).where(T.owner == owner, T.server == server_key(url))
                                            .execution_options(synchronize_session=False))) > 0

    def raw(self, owner: str, url: str) -> tuple[str | None, str | None] | None:
        """The row's stored (encrypted) columns as they are, for checks and tests."""
        with database_errors(), self._sessions() as session:
            row = session.scalar(select(T).where(T.owner == owner, T.server == server_key(url)))
        return None if row is None else (row.tokens, row.client_info)

