"""The sidebar's history for the current page: new conversation, search, the list (newest first), and for the open
conversation rename, export (JSON, Markdown) and delete; import of an exported JSON file."""

from __future__ import annotations

import json
import re

import streamlit as st

from app.conversation import Conversation
from app.storage import ConversationNotFound, ImportRejected, StorageError
from app.ui import persistence
from app.ui.persistence import owner, store
from app.ui.safe_markdown import safe_label, safe_markdown

_LISTED = 30
_NOTICE = "_history_notice"


def render(page: str, conversation: Conversation) -> None:
    if notice := st.session_state.pop(_NOTICE, None):
        st.toast(safe_label(notice), icon=":material/upload:")
    with st.sidebar:
        st.subheader("History")
        who = owner()
        if who is None:
            st.caption("Sign in to keep your conversations: they are saved for you alone.")
            st.button("Sign in", key="history_login", icon=":material/login:", width="stretch", on_click=st.login)
            return
        st.button("New conversation", key="history_new", icon=":material/add_comment:", width="stretch",
                  on_click=persistence.start_new, args=(page, conversation))
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
        for item in listed:
            st.button(safe_label(item.title) or "Untitled", key=f"history_open/{item.id}", width="stretch",
                      type="primary" if item.id == current else "tertiary",
                      help=f"{item.message_count} messages · {item.updated_at:%Y-%m-%d %H:%M} UTC",
                      on_click=_open, args=(page, conversation, item.id))
        if current is not None:
            _this_conversation(page, conversation, current, who)
        _import(page, who)


def _open(page: str, conversation: Conversation, conversation_id: str) -> None:
    try:
        persistence.load(page, conversation, conversation_id)
    except ConversationNotFound:
        st.toast("That conversation no longer exists.", icon=":material/search_off:")
    except StorageError as exc:
        st.toast(safe_label(f"Could not open the conversation: {exc}"), icon=":material/error:")


def _file_name(title: str, suffix: str) -> str:
    return (re.sub(r"[^\w-]+", "-", title).strip("-")[:60] or "conversation") + suffix


def _this_conversation(page: str, conversation: Conversation, conversation_id: str, who: str) -> None:
    try:
        stored = store().get(who, conversation_id, with_messages=False)
    except StorageError:
        return
    with st.expander("This conversation"):
        title = st.text_input("Title", value=stored.title, key=f"history_title/{conversation_id}/{stored.version}")
        if title.strip() and title.strip() != stored.title:
            _rename(page, who, conversation_id, title.strip(), stored.version)
        left, right = st.columns(2)
        left.download_button("JSON", key="history_export_json", icon=":material/download:", width="stretch",
                             file_name=_file_name(stored.title, ".json"), mime="application/json",
                             on_click="ignore",
                             data=lambda: json.dumps(store().export_json(who, conversation_id), indent=1))
        right.download_button("Markdown", key="history_export_md", icon=":material/download:", width="stretch",
                              file_name=_file_name(stored.title, ".md"), mime="text/markdown", on_click="ignore",
                              data=lambda: store().export_markdown(who, conversation_id))
        with st.popover("Delete", icon=":material/delete:", width="stretch"):
            title = stored.title or "Untitled"
            st.markdown(safe_markdown(f"Delete **{title}** and its {stored.message_count} messages for good?"))
            st.button("Delete for good", key="history_delete", type="primary",
                      on_click=_delete, args=(page, conversation, who, conversation_id))


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
    st.toast("Deleted.", icon=":material/delete:")


def _import(page: str, who: str) -> None:
    upload = st.file_uploader("Import a conversation (JSON export)", type=["json"], key=f"history_import/{page}")
    if upload is None or st.session_state.get("_history_imported") == upload.file_id:
        return
    st.session_state["_history_imported"] = upload.file_id  # one import per file, not one per rerun
    try:
        imported = store().import_json(who, upload.getvalue(), page=page)  # it joins this page's history
    except ImportRejected as exc:
        st.error(safe_markdown(f"{upload.name} was not imported: {exc}"), icon=":material/error:")
        return
    except StorageError as exc:
        st.error(safe_markdown(f"{upload.name} could not be imported: {exc}"), icon=":material/error:")
        return
    st.session_state[_NOTICE] = f"Imported {upload.name}."  # a toast right before a rerun would be lost
    persistence.show_next_run(imported)  # opened before its settings' widgets are drawn
    st.rerun()
