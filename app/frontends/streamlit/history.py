"""The sidebar's history for the current page, at its top: new conversation, search, the list (newest first, under
Today / Yesterday / Previous 7 days / Older), and next to the open conversation's entry a menu to rename, export
(JSON, Markdown) and delete it; import of an exported JSON file."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import streamlit as st

from app.domain.conversation import Conversation
from app.frontends.streamlit import history_window, persistence, sidebar, state
from app.frontends.streamlit.persistence import owner, store
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.storage import ConversationNotFound, ImportRejected, StorageError
from app.storage.records import ConversationSummary

_LISTED = 30
_NOTICE = "_history_notice"


def render(page: str, conversation: Conversation) -> None:
    if notice := st.session_state.pop(_NOTICE, None):
        st.toast(safe_label(notice), icon=":material/upload:")
    state.forget_page_change()
    with sidebar.history_section():
        _history(page, conversation)


@st.fragment
def _history(page: str, conversation: Conversation) -> None:
    """The history, as a fragment: searching, opening the menu and renaming rerun the history alone, not the page
    and its conversation. A click that puts another conversation on the page (open, new, delete, import) reruns the
    whole app, from here, since a callback cannot."""
    state.rerun_if_page_changed()
    who = owner()
    if who is None:
        st.subheader("History")
        st.caption("Sign in to keep your conversations: they are saved for you alone.")
        st.button("Sign in", key="history_login", icon=":material/login:", width="stretch", on_click=st.login)
        return
    st.button("New conversation", key="history_new", icon=":material/add_comment:", width="stretch",
              on_click=_start_new, args=(page, conversation))
    search = st.text_input("Search conversations", key=f"history_search/{page}", label_visibility="collapsed",
                           placeholder="Search titles and messages", icon=":material/search:")
    try:
        listed = store().list(who, page=page, search=search.strip(), limit=_LISTED)
    except StorageError as exc:
        st.caption(safe_markdown(f"The history is not available: {exc}"))
        return
    current = persistence.binding(page).conversation_id
    if not listed:
        st.caption("No conversation matches." if search.strip() else "Conversations appear here once sent.")
    group = None
    for item in listed:
        if (when := day_group(item.updated_at)) != group:
            group = when
            st.caption(when)
        if item.id == current:
            _current_entry(page, conversation, item, who)
        else:
            st.button(safe_label(item.title) or "Untitled", key=f"history_open/{item.id}", width="stretch",
                      type="tertiary", help=_entry_help(item), on_click=_open, args=(page, conversation, item.id))
    with st.expander("Import a conversation", icon=":material/upload_file:"):
        _import(page, who)
    st.divider()


def day_group(when: datetime, now: datetime | None = None) -> str:
    """The heading an entry updated at `when` (UTC) is listed under."""
    today = (now or datetime.now(UTC)).date()
    day = when.astimezone(UTC).date() if when.tzinfo else when.date()
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    if day > today - timedelta(days=7):
        return "Previous 7 days"
    return "Older"


def _entry_help(item: ConversationSummary) -> str:
    return f"{item.message_count} messages · {item.updated_at:%Y-%m-%d %H:%M} UTC"


def _start_new(page: str, conversation: Conversation) -> None:
    persistence.start_new(page, conversation)
    state.page_changed()


def _open(page: str, conversation: Conversation, conversation_id: str) -> None:
    state.page_changed()
    try:
        persistence.load(page, conversation, conversation_id)
    except ConversationNotFound:
        st.toast("That conversation no longer exists.", icon=":material/search_off:")
    except StorageError as exc:
        st.toast(safe_label(f"Could not open the conversation: {exc}"), icon=":material/error:")
    else:
        _show_search_hit(page, conversation, conversation_id)


def _show_search_hit(page: str, conversation: Conversation, conversation_id: str) -> None:
    """Opened from a search: the first message that matches is drawn, however far back it is."""
    search = str(st.session_state.get(f"history_search/{page}") or "").strip().casefold()
    if search:
        hit = next((i for i, m in enumerate(conversation.messages) if search in m.content.casefold()), None)
        if hit is not None:
            history_window.show_message(page, conversation_id, conversation, hit)


def _file_name(title: str, suffix: str) -> str:
    return (re.sub(r"[^\w-]+", "-", title).strip("-")[:60] or "conversation") + suffix


def _current_entry(page: str, conversation: Conversation, item: ConversationSummary, who: str) -> None:
    """The open conversation's entry, highlighted, with its menu next to it: rename, export, delete."""
    entry, menu = st.columns([5, 1], gap=None, vertical_alignment="center")
    entry.button(safe_label(item.title) or "Untitled", key=f"history_open/{item.id}", width="stretch",
                 type="primary", help=_entry_help(item), on_click=_open, args=(page, conversation, item.id))
    with menu.popover("", icon=":material/more_vert:", key="history_menu", type="tertiary",
                      help="Rename, export or delete"):
        _menu(page, conversation, item, who)


def _menu(page: str, conversation: Conversation, item: ConversationSummary, who: str) -> None:
    try:
        stored = store().get(who, item.id, with_messages=False)
    except StorageError as exc:
        st.caption(safe_markdown(f"Not available: {exc}"))
        return
    key = f"history_title/{item.id}/{stored.version}"
    st.text_input("Title", value=stored.title, key=key, on_change=_rename_from,
                  args=(page, who, item.id, key, stored.title, stored.version))
    st.download_button("Export as JSON", key="history_export_json", icon=":material/download:", width="stretch",
                       file_name=_file_name(stored.title, ".json"), mime="application/json", on_click="ignore",
                       data=lambda: json.dumps(store().export_json(who, item.id), indent=1))
    st.download_button("Export as Markdown", key="history_export_md", icon=":material/download:", width="stretch",
                       file_name=_file_name(stored.title, ".md"), mime="text/markdown", on_click="ignore",
                       data=lambda: store().export_markdown(who, item.id))
    title = stored.title or "Untitled"
    st.caption(safe_markdown(f"Delete **{title}** and its {stored.message_count} messages for good:"))
    st.button("Delete", key="history_delete", type="primary", icon=":material/delete:", width="stretch",
              on_click=_delete, args=(page, conversation, who, item.id))


def _rename_from(page: str, who: str, conversation_id: str, key: str, old_title: str, version: int) -> None:
    """The title box's callback: it runs before the next run draws the list, which then shows the new title."""
    title = str(st.session_state.get(key, "")).strip()
    if title and title != old_title:
        _rename(page, who, conversation_id, title, version)


def _rename(page: str, who: str, conversation_id: str, title: str, version: int) -> None:
    try:
        persistence.binding(page).version = store().rename(who, conversation_id, title, version)
    except StorageError as exc:
        st.toast(safe_label(f"Could not rename: {exc}"), icon=":material/error:")


def _delete(page: str, conversation: Conversation, who: str, conversation_id: str) -> None:
    try:
        store().delete(who, conversation_id)
    except StorageError as exc:
        st.toast(safe_label(f"Could not delete: {exc}"), icon=":material/error:")
        return
    persistence.start_new(page, conversation)
    state.page_changed()
    st.toast("Deleted.", icon=":material/delete:")


def _import(page: str, who: str) -> None:
    upload = st.file_uploader("Import a conversation (JSON export)", type=["json"], key=f"history_import/{page}")
    if upload is None or st.session_state.get("_history_imported") == upload.file_id:
        return
    st.session_state["_history_imported"] = upload.file_id  # one import per file, not one per rerun
    try:
        imported = store().import_file(who, upload.getvalue(), page=page)  # it joins this page's history
    except ImportRejected as exc:
        st.error(safe_markdown(f"{upload.name} was not imported: {exc}"), icon=":material/error:")
        return
    except StorageError as exc:
        st.error(safe_markdown(f"{upload.name} could not be imported: {exc}"), icon=":material/error:")
        return
    notice = f"Imported {upload.name}."
    if imported.not_granted:
        names = ", ".join(imported.not_granted[:5]) + (" and more" if len(imported.not_granted) > 5 else "")
        notice += (f" It asked to run {names} without asking you; an imported file cannot grant that, so they keep "
                   "their usual setting. Choose Run in the sidebar if you trust them.")
    st.session_state[_NOTICE] = notice  # a toast right before a rerun would be lost
    persistence.show_next_run(imported.id)  # opened before its settings' widgets are drawn
    st.rerun()
