"""Each page's conversation, saved as it happens and reopened from the URL (`?c=<id>`).

The page keeps working on its in-memory Conversation; `save()` brings the database level with it after every
event that changed it (a message sent, an answer or a tool result finished, Regenerate, Resend). It remembers a
fingerprint of each message it saved, so it only appends what is new, and truncates (with the version it last
saw) only when the conversation was rewound. When saving fails the conversation stays as it is on screen and the
next save tries again: nothing is lost. Everything here lives in st.session_state; the store is one per process.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app.conversation import Conversation, Message
from app.storage import (ConversationNotFound, ConversationStore, StorageError, StoredConversation, VersionConflict,
                         default_store)
from app.storage.codec import encode_message_json
from app.ui import state

log = logging.getLogger(__name__)
LOCAL_OWNER = "local"  # a demo on one's own machine: one user, every conversation theirs
QUERY_KEY = "c"
_BINDING = "_binding"
# Settings that belong to a conversation: restored into these widget keys when it is opened.
SETTINGS_KEYS = {"system_prompt": "system_prompt", "tool_choice": "settings.{page}.choice"}


@dataclass
class Binding:
    """Which stored conversation a page shows, and what of it this session has saved."""

    conversation_id: str | None = None
    version: int = 0
    saved: list[str] = field(default_factory=list)  # fingerprints of the saved messages, in order
    settings: dict[str, Any] = field(default_factory=dict)


class _StoreOpener:
    """Opens the store once per app process; while the database cannot be reached, tries again at most every
    `retry_s` seconds, so a page does not wait for a connection timeout at every step of every run."""

    def __init__(self, retry_s: float = 30.0) -> None:
        self.retry_s = retry_s
        self._store: ConversationStore | None = None
        self._failure: tuple[float, StorageError] | None = None
        self._lock = threading.Lock()

    def get(self) -> ConversationStore:
        with self._lock:
            if self._store is not None:
                return self._store
            if self._failure is not None and time.monotonic() - self._failure[0] < self.retry_s:
                raise self._failure[1]
            try:
                self._store = default_store()
            except StorageError as exc:
                self._failure = (time.monotonic(), exc)
                raise
            return self._store


@st.cache_resource(show_spinner=False)
def _opener() -> _StoreOpener:
    return _StoreOpener()


def store() -> ConversationStore:
    """The store (engine and connection pool), one per app process and shared by sessions: it keeps no session's
    state. StorageError while the database cannot be opened."""
    return _opener().get()


def authentication_configured() -> bool:
    """Whether Streamlit authentication (st.login with an OIDC provider) is set up in .streamlit/secrets.toml."""
    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file at all
        return False


def owner() -> str | None:
    """Whose conversations these are: everything is the one local user's unless authentication is configured;
    then the signed-in user's, and None for a visitor who has not signed in (nothing is saved or listed for
    them: an anonymous owner shared by every visitor would show each one the others' conversations)."""
    if not authentication_configured():
        return LOCAL_OWNER
    if st.user.get("is_logged_in"):  # a mapping key: missing, not False, where no login has happened yet
        return str(st.user.get("email") or st.user.get("sub"))
    return None


def binding(page: str) -> Binding:
    return state.per_page(_BINDING, page, Binding)


def fingerprint(message: Message) -> str:
    """Identifies a message by what the store keeps of it (the same encoding, computed once, in one step)."""
    return hashlib.sha256(encode_message_json(message).encode()).hexdigest()


def open_from_url(page: str, conversation: Conversation) -> None:
    """Show the conversation named in the URL (a refresh, a link, a history entry), or put the page's own
    conversation's id there. A conversation opens on its own page only: an id of another page's conversation
    (left in the URL by a page switch) is replaced by this page's own."""
    bound = binding(page)
    wanted = st.query_params.get(QUERY_KEY)
    who = owner()
    if who is None:
        return
    if wanted and wanted != bound.conversation_id:
        try:
            stored = store().get(who, wanted)
        except ConversationNotFound:
            _point_url_at(bound)
            st.toast("That conversation does not exist (or is not yours).", icon=":material/search_off:")
            return
        except StorageError as exc:
            st.toast(f"Could not open the conversation: {exc}", icon=":material/error:")
            return
        if stored.page == page:
            show(page, conversation, stored)
        else:
            _point_url_at(bound)
    elif bound.conversation_id and wanted != bound.conversation_id:
        _point_url_at(bound)


def _point_url_at(bound: Binding) -> None:
    if bound.conversation_id:
        st.query_params[QUERY_KEY] = bound.conversation_id
    else:
        st.query_params.pop(QUERY_KEY, None)


def load(page: str, conversation: Conversation, conversation_id: str) -> None:
    """Replace the page's conversation with a stored one (history entries: called before widgets are drawn)."""
    who = owner()
    if who is None:
        raise ConversationNotFound(conversation_id)
    show(page, conversation, store().get(who, conversation_id))


def show(page: str, conversation: Conversation, stored: StoredConversation) -> None:
    """Make `stored` the page's conversation, with its settings."""
    conversation.messages[:] = stored.messages
    state.replace_per_page(_BINDING, page, Binding(stored.id, stored.version,
                                                  [fingerprint(m) for m in stored.messages], dict(stored.settings)))
    for name, key in SETTINGS_KEYS.items():
        if name in (stored.settings or {}):
            st.session_state[key.format(page=page)] = stored.settings[name]
    st.query_params[QUERY_KEY] = stored.id


def show_next_run(conversation_id: str) -> None:
    """Open this conversation on the next run (open_from_url loads it before any widget is drawn)."""
    st.query_params[QUERY_KEY] = conversation_id


def start_new(page: str, conversation: Conversation) -> None:
    """An empty conversation on this page; the one it showed stays in the history."""
    conversation.clear()
    state.replace_per_page(_BINDING, page, Binding())
    st.query_params.pop(QUERY_KEY, None)


def current_settings(page: str) -> dict[str, Any]:
    return {name: st.session_state[key.format(page=page)] for name, key in SETTINGS_KEYS.items()
            if key.format(page=page) in st.session_state}


def save(page: str, conversation: Conversation) -> bool:
    """Bring the stored conversation level with the page's; False (with a visible warning) if that failed."""
    bound = binding(page)
    prints = [fingerprint(m) for m in conversation.messages]
    if owner() is None or (bound.conversation_id is None and not prints):
        return True  # a visitor who has not signed in keeps the conversation in this tab only
    try:
        _save(page, conversation, bound, prints)
        return True
    except VersionConflict:
        st.warning("This conversation was changed in another tab: reopen it from the history to see both; what "
                   "you see here is kept until then.", icon=":material/sync_problem:")
    except ConversationNotFound:
        st.warning("This conversation was deleted elsewhere: what you see here is not saved. Start a new "
                   "conversation to keep chatting with history.", icon=":material/delete:")
    except StorageError as exc:
        log.warning("Saving the conversation failed", exc_info=True)
        st.warning(f"The conversation could not be saved ({exc}); it stays here and is saved at the next "
                   "message.", icon=":material/cloud_off:")
    return False


def _save(page: str, conversation: Conversation, bound: Binding, prints: list[str]) -> None:
    db, who = store(), owner()
    assert who is not None
    if bound.conversation_id is None:
        bound.conversation_id = db.create(who, page, settings=current_settings(page))
        bound.version, bound.saved = db.get(who, bound.conversation_id).version, []
        st.query_params[QUERY_KEY] = bound.conversation_id
    common = 0
    while common < min(len(prints), len(bound.saved)) and prints[common] == bound.saved[common]:
        common += 1
    if common < len(bound.saved):  # rewound (Regenerate, Resend): drop what follows, if nobody changed it since
        bound.version = db.truncate(who, bound.conversation_id, common, bound.version, len(bound.saved))
        bound.saved = bound.saved[:common]
    for message, print_ in zip(conversation.messages[common:], prints[common:], strict=True):
        db.append(who, bound.conversation_id, message)
        bound.saved.append(print_)
    settings = current_settings(page)
    if settings != bound.settings:
        db.update_settings(who, bound.conversation_id, settings)
        bound.settings = settings
