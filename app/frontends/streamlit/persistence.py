"""Each page's conversation, saved as it happens and reopened from the URL (`?c=<id>`).

The page keeps working on its in-memory Conversation; `save()` brings the database level with it after every
event that changed it (a message sent, an answer or a tool result finished, Regenerate, Resend). It remembers a
fingerprint of each message it saved, so it only appends what is new, rewrites in place a message that changed
(feedback on an answer), and truncates (with the version it last saw) only when the conversation was rewound. When
saving fails the conversation stays as it is on screen and the next save tries again: nothing is lost. Everything
here lives in st.session_state; the store is one per process.

A stored conversation the page cannot show (a message in no shape this version reads, or anything that makes
drawing it fail) is explained in its place, never a traceback, and stays in the history to export or delete; a
stored setting of the wrong type is left at its default, with a notice.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from app.config import LOCAL_OWNER
from app.domain.conversation import Conversation, Message
from app.frontends.streamlit import run_policies, state
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.storage import (
    ConversationNotFound,
    ConversationStore,
    StorageError,
    StoredConversation,
    UnreadableConversation,
    VersionConflict,
    default_store,
)
from app.storage.codec import encode_message_json
from app.storage.schema import SettingsRecord
from app.storage.sessions import EngineStore

log = logging.getLogger(__name__)

QUERY_KEY = "c"
_BINDING = "_binding"
# Settings that belong to a conversation: restored into these widget keys when it is opened.
SETTINGS_KEYS = {"system_prompt": "system_prompt", "tool_choice": "settings.{page}.choice",
                 "tool_policies": run_policies.OVERRIDES_KEY}
P = ParamSpec("P")


@dataclass
class Binding:
    """Which stored conversation a page shows, and what of it this session has saved."""

    conversation_id: str | None = None
    version: int = 0
    saved: list[str] = field(default_factory=list)  # fingerprints of the saved messages, in order
    settings: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why the bound conversation cannot be shown (then the page shows none of it)


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


S = TypeVar("S", bound=EngineStore)


@st.cache_resource(show_spinner=False)
def _store_on(name: str, engine_id: int, _kind: type[EngineStore]) -> EngineStore:
    # Cached by the kind's name and the engine (a leading underscore: Streamlit does not hash the class itself).
    return _kind(store().engine)


def store_of(kind: type[S]) -> S:
    """Another store on the conversations' database (knowledge, presets, folders), one per app process and kind.
    StorageError while the database cannot be opened."""
    made = _store_on(f"{kind.__module__}.{kind.__qualname__}", id(store().engine), kind)
    assert isinstance(made, kind)
    return made


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
        problem = None
        try:
            stored = store().get(who, wanted)
        except ConversationNotFound:
            _point_url_at(bound)
            st.toast("That conversation does not exist (or is not yours).", icon=":material/search_off:")
            return
        except UnreadableConversation as exc:
            stored, problem = exc.stored, str(exc)
        except StorageError as exc:
            st.toast(safe_label(f"Could not open the conversation: {exc}"), icon=":material/error:")
            return
        if stored.page == page:
            show(page, conversation, stored, problem)
        else:
            _point_url_at(bound)
    elif bound.conversation_id and wanted != bound.conversation_id:
        _point_url_at(bound)
    if (problem := binding(page).problem) is not None:  # on every run while the page is bound to it
        st.error(cannot_show(problem), icon=":material/error:")


def cannot_show(problem: str) -> str:
    return safe_markdown(f"This conversation could not be shown: {problem}. It is kept: export it or delete it "
                         "(This conversation, in the sidebar), or start a new conversation.")


def shown_safely(render: Callable[P, None]) -> Callable[P, DeltaGenerator]:
    """Wrap the function that draws a stored conversation: when drawing fails, whatever it drew is replaced by
    why, instead of a traceback that ends the run (the sidebar and the history are drawn before it and work).

    The wrapped function returns the container it drew into, for the page to go on drawing in (the new message,
    the turn as it streams). Drawn in the same container, the streaming answer takes the place of the bubble
    that a Regenerate or an edit removed; in a container of its own it would appear below that bubble, which
    Streamlit keeps on screen (stale) until the run ends."""

    @functools.wraps(render)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> DeltaGenerator:
        slot = st.empty()
        box = slot.container()
        try:
            with box:
                render(*args, **kwargs)
        except Exception as exc:  # Streamlit's rerun and stop are BaseExceptions: they pass
            log.exception("A conversation could not be shown")
            box = slot.container()
            box.error(cannot_show(f"{type(exc).__name__}: {str(exc)[:300]}"), icon=":material/error:")
        return box

    return guarded


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
    try:
        show(page, conversation, store().get(who, conversation_id))
    except UnreadableConversation as exc:
        show(page, conversation, exc.stored, str(exc))


def show(page: str, conversation: Conversation, stored: StoredConversation, problem: str | None = None) -> None:
    """Make `stored` the page's conversation, with its settings; given a `problem` (its messages cannot be read),
    bind the page to it without messages, saying why."""
    conversation.messages[:] = stored.messages if problem is None else []
    raw = stored.settings if isinstance(stored.settings, dict) else {}  # a JSON column holds any JSON
    state.replace_per_page(_BINDING, page, Binding(stored.id, stored.version,
                                                  [fingerprint(m) for m in conversation.messages], dict(raw),
                                                  problem))
    settings, wrong = SettingsRecord.usable(stored.settings)
    for name, key in SETTINGS_KEYS.items():
        if name in settings:
            st.session_state[key.format(page=page)] = settings[name]
        elif name in raw:  # of the wrong type: the widget's default, not the previous conversation's
            st.session_state.pop(key.format(page=page), None)
    if wrong:
        st.toast(safe_label("Settings of this conversation that could not be used were left at their defaults: "
                            + "; ".join(wrong)), icon=":material/warning:")
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
    if bound.problem is not None:  # the unshowable conversation stays as stored; what is written now goes anew
        if not prints:
            return True
        bound = state.replace_per_page(_BINDING, page, Binding())
    who = owner()
    if who is None or (bound.conversation_id is None and not prints):
        return True  # a visitor who has not signed in keeps the conversation in this tab only
    try:
        _write(SaveTarget(store(), who, bound, current_settings(page)), page, conversation, prints, _show_address)
        return True
    except VersionConflict:
        st.warning("This conversation was changed in another tab: reopen it from the history to see both; what "
                   "you see here is kept until then.", icon=":material/sync_problem:")
    except ConversationNotFound:
        st.warning("This conversation was deleted elsewhere: what you see here is not saved. Start a new "
                   "conversation to keep chatting with history.", icon=":material/delete:")
    except StorageError as exc:
        log.warning("Saving the conversation failed", exc_info=True)
        st.warning(safe_markdown(f"The conversation could not be saved ({exc}); it stays here and is saved at the next "
                                 "message."), icon=":material/cloud_off:")
    return False


@dataclass(frozen=True)
class SaveTarget:
    """What saving a page's conversation needs from its session (the store, the owner, the binding, the
    settings), read at once: a run whose tab was closed or refreshed can no longer read its session, since every
    read of st.session_state raises Streamlit's stop again."""

    db: ConversationStore
    who: str
    bound: Binding
    settings: dict[str, Any]


def save_target(page: str) -> SaveTarget | None:
    """Where an interrupted turn will be saved, read before the turn starts; None where nothing is saved (a
    visitor who has not signed in, a conversation that cannot be shown, a database that cannot be reached)."""
    bound, who = binding(page), owner()
    if who is None or bound.problem is not None:
        return None
    try:
        return SaveTarget(store(), who, bound, current_settings(page))
    except StorageError:
        return None


def save_interrupted(page: str, target: SaveTarget | None, conversation: Conversation) -> None:
    """Store what an interrupted turn left (the answer so far, a call marked stopped) from the run that is being
    stopped: when the tab was closed or refreshed, no later run of this session comes to do it. It reads nothing of
    the session (see SaveTarget). Best effort: the run is on its way out, and what fails is logged."""
    if target is None:
        return
    try:
        prints = [fingerprint(m) for m in conversation.messages]
        if target.bound.conversation_id is None and not prints:
            return
        _write(target, page, conversation, prints, _try_to_show_address)
    except BaseException:  # the caller re-raises its own (Streamlit's stop or rerun)
        log.warning("What an interrupted turn left could not be saved", exc_info=True)


def _show_address(conversation_id: str) -> None:
    st.query_params[QUERY_KEY] = conversation_id


def _try_to_show_address(conversation_id: str) -> None:
    """A Stop in a live tab: its next run opens the new conversation. A closed tab has no address to set."""
    try:
        _show_address(conversation_id)
    except BaseException:
        log.debug("The interrupted run could not set the conversation's address", exc_info=True)


def changed_elsewhere(page: str) -> bool:
    """Whether the stored conversation has moved on since this session last saved it (another tab answered its
    waiting calls, say). False when it is not stored or cannot be read: then there is nothing to compare."""
    bound, who = binding(page), owner()
    if bound.conversation_id is None or who is None or bound.problem is not None:
        return False
    try:
        stored = store().get(who, bound.conversation_id, with_messages=False)
    except StorageError:
        return False
    return stored.version != bound.version or stored.message_count != len(bound.saved)


def _write(target: SaveTarget, page: str, conversation: Conversation, prints: list[str],
           created: Callable[[str], None]) -> None:
    """Bring the stored conversation level with `conversation`; nothing of Streamlit is touched but through
    `created`, called with the id of a conversation this creates (for the page's address) as soon as it exists."""
    db, who, bound = target.db, target.who, target.bound
    if bound.conversation_id is None:
        bound.conversation_id = db.create(who, page, settings=target.settings)
        bound.version, bound.saved = db.get(who, bound.conversation_id).version, []
        created(bound.conversation_id)
    saved = len(bound.saved)
    changed = {index: conversation.messages[index] for index in range(min(saved, len(prints)))
               if prints[index] != bound.saved[index]}
    if changed and len(prints) >= saved:  # messages changed in place (feedback; a switch to a version as long)
        bound.version = db.replace_messages(who, bound.conversation_id, changed, bound.version, saved)
        bound.saved = prints[:saved]
    elif len(prints) < saved:  # rewound (Regenerate, Resend): drop what follows, if nobody changed it since
        common = min(changed, default=len(prints))
        bound.version = db.truncate(who, bound.conversation_id, common, bound.version, saved)
        bound.saved = bound.saved[:common]
    common = len(bound.saved)
    for message, print_ in zip(conversation.messages[common:], prints[common:], strict=True):
        db.append(who, bound.conversation_id, message)
        bound.saved.append(print_)
    if target.settings != bound.settings:
        db.update_settings(who, bound.conversation_id, target.settings)
        bound.settings = target.settings
