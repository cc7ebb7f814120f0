"""The sidebar's history for the current page, at its top: new conversation, search, a folder and a tag to filter by,
the list (pinned first, then newest first, under Today / Yesterday / Previous 7 days / Older), and next to the open
conversation's entry a menu to rename, pin, file in a folder, tag, export (JSON, Markdown) and delete it; folders to
make, rename and delete; import of an exported JSON file."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import streamlit as st

from app.domain.conversation import Conversation
from app.frontends.streamlit import history_window, persistence, sidebar, state
from app.frontends.streamlit.persistence import owner, store, store_of
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.frontends.streamlit.share_html import conversation_html
from app.storage import ConversationNotFound, ImportRejected, StorageError
from app.storage.folders import MAX_TAGS, Folder, FolderRefused, FolderStore
from app.storage.records import ConversationSummary
from app.storage.repository import ALL_FOLDERS

_LISTED = 30
_NOTICE = "_history_notice"
_CONVERSATION_PAGES = ("chat", "tools", "all_tools")  # the pages with a history
_NO_FOLDER = ""  # the filter's and the menu's "Not in a folder" (None reads as "nothing chosen" to a selectbox)


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
        folders = store_of(FolderStore).list(who, page=page)
        tags = store().tags(who, page=page)
    except StorageError as exc:
        st.caption(safe_markdown(f"The history is not available: {exc}"))
        return
    folder, tag = _filters(page, folders, tags, searching=bool(search.strip()))
    try:
        listed = store().list(who, page=page, search=search.strip(), limit=_LISTED, folder=folder, tag=tag)
    except StorageError as exc:
        st.caption(safe_markdown(f"The history is not available: {exc}"))
        return
    current = persistence.binding(page).conversation_id
    if not listed:
        st.caption("No conversation matches." if search.strip() or folder != ALL_FOLDERS or tag else
                   "Conversations appear here once sent.")
    names = {item.id: item.name for item in folders}
    group = None
    for item in listed:
        if (when := "Pinned" if item.pinned else day_group(item.updated_at)) != group:
            group = when
            st.caption(when)
        if item.id == current:
            _current_entry(page, conversation, item, who, folders)
        else:
            st.button(safe_label(item.title) or "Untitled", key=f"history_open/{item.id}", width="stretch",
                      type="tertiary", help=_entry_help(item, names), on_click=_open,
                      args=(page, conversation, item.id))
    with st.expander("Folders", icon=":material/folder:"):
        _folders(page, conversation, who, folders)
    with st.expander("Import a conversation", icon=":material/upload_file:"):
        _import(page, who)
    st.divider()


def _filters(page: str, folders: list[Folder], tags: list[tuple[str, int]], searching: bool) -> tuple[str | None, str]:
    """The folder and tag the list shows (a search crosses every folder and tag)."""
    folder_key, tag_key = f"history_folder/{page}", f"history_tag/{page}"
    options = [ALL_FOLDERS, _NO_FOLDER, *(item.id for item in folders)]
    labels = {ALL_FOLDERS: "All conversations", _NO_FOLDER: "Not in a folder"} | {
        item.id: f"{item.name} ({item.conversations})" for item in folders}
    if st.session_state.get(folder_key, ALL_FOLDERS) not in options:  # its folder was deleted
        st.session_state[folder_key] = ALL_FOLDERS
    if folders:
        st.selectbox("Folder", options, key=folder_key, label_visibility="collapsed",
                     format_func=lambda option: safe_label(labels[option]), disabled=searching,
                     help="A search looks in every folder." if searching else "Show one folder's conversations")
    names = [name for name, _ in tags]
    if st.session_state.get(tag_key) not in names:
        st.session_state[tag_key] = None
    if tags:
        st.pills("Tags", names, key=tag_key, label_visibility="collapsed", disabled=searching,
                 format_func=lambda name: safe_label(f"#{name}"))
    if searching:
        return ALL_FOLDERS, ""
    chosen = str(st.session_state.get(folder_key, ALL_FOLDERS))
    return (None if chosen == _NO_FOLDER else chosen), str(st.session_state.get(tag_key) or "")


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


def _entry_help(item: ConversationSummary, folders: dict[str, str]) -> str:
    where = [f"in {folders[item.folder_id]}"] if item.folder_id in folders else []
    tags = [" ".join(f"#{tag}" for tag in item.tags)] if item.tags else []
    return safe_markdown(" · ".join([f"{item.message_count} messages", f"{item.updated_at:%Y-%m-%d %H:%M} UTC",
                                     *where, *tags]))  # a tooltip is markdown: the user's names are text


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


def _current_entry(page: str, conversation: Conversation, item: ConversationSummary, who: str,
                   folders: list[Folder]) -> None:
    """The open conversation's entry, highlighted, with its menu next to it: rename, pin, folder, tags, export,
    delete."""
    entry, menu = st.columns([5, 1], gap=None, vertical_alignment="center")
    entry.button(safe_label(item.title) or "Untitled", key=f"history_open/{item.id}", width="stretch",
                 type="primary", help=_entry_help(item, {f.id: f.name for f in folders}), on_click=_open,
                 args=(page, conversation, item.id))
    with menu.popover("", icon=":material/more_vert:", key="history_menu", type="tertiary",
                      help="Rename, pin, file, tag, export or delete"):
        _menu(page, conversation, item, who, folders)


def _menu(page: str, conversation: Conversation, item: ConversationSummary, who: str,
          folders: list[Folder]) -> None:
    try:
        stored = store().get(who, item.id, with_messages=False)
    except StorageError as exc:
        st.caption(safe_markdown(f"Not available: {exc}"))
        return
    key = f"history_title/{item.id}/{stored.version}"
    st.text_input("Title", value=stored.title, key=key, on_change=_rename_from,
                  args=(page, who, item.id, key, stored.title, stored.version))
    _organise(who, item, folders)
    st.download_button("Export as JSON", key="history_export_json", icon=":material/download:", width="stretch",
                       file_name=_file_name(stored.title, ".json"), mime="application/json", on_click="ignore",
                       data=lambda: json.dumps(store().export_json(who, item.id), indent=1))
    st.download_button("Export as Markdown", key="history_export_md", icon=":material/download:", width="stretch",
                       file_name=_file_name(stored.title, ".md"), mime="text/markdown", on_click="ignore",
                       data=lambda: store().export_markdown(who, item.id))
    st.download_button("Share as a web page", key="history_export_html", icon=":material/share:", width="stretch",
                       file_name=_file_name(stored.title, ".html"), mime="text/html", on_click="ignore",
                       help="One HTML file that opens in any browser, offline: text, thoughts, tool calls, pictures "
                            "and sources. It runs no script and loads nothing.",
                       data=lambda: conversation_html(stored.title, store().get(who, item.id).messages))
    title = stored.title or "Untitled"
    st.caption(safe_markdown(f"Delete **{title}** and its {stored.message_count} messages for good:"))
    st.button("Delete", key="history_delete", type="primary", icon=":material/delete:", width="stretch",
              on_click=_delete, args=(page, conversation, who, item.id))


def _organise(who: str, item: ConversationSummary, folders: list[Folder]) -> None:
    """Pin, folder and tags of the open conversation: each change is stored at once and redraws the history."""
    st.button("Unpin" if item.pinned else "Pin to the top", key="history_pin", width="stretch",
              icon=":material/keep_off:" if item.pinned else ":material/keep:",
              on_click=_organised, args=(lambda: store().set_pinned(who, item.id, not item.pinned),))
    options = [_NO_FOLDER, *(folder.id for folder in folders)]
    names = {_NO_FOLDER: "Not in a folder"} | {folder.id: folder.name for folder in folders}
    folder_key = f"history_move/{item.id}/{item.folder_id or _NO_FOLDER}"
    st.selectbox("Folder", options, index=options.index(item.folder_id) if item.folder_id in options else 0,
                 key=folder_key, format_func=lambda option: safe_label(names[option]),
                 help="Make folders under Folders, below the list.",
                 on_change=lambda: _organised(lambda: store().move(
                     who, item.id, st.session_state[folder_key] or None)))
    tags_key = f"history_tags/{item.id}/{','.join(item.tags)}"
    try:
        known = sorted({tag for tag, _ in store().tags(who)} | set(item.tags))
    except StorageError:
        known = list(item.tags)
    st.multiselect("Tags", known, default=list(item.tags), key=tags_key, accept_new_options=True,
                   max_selections=MAX_TAGS, placeholder="Add a tag", on_change=_retag, args=(who, item, tags_key))


def _retag(who: str, item: ConversationSummary, key: str) -> None:
    """Store the tags; the box then shows what was stored (cleaned, or as it was when refused), not what was typed."""
    kept: list[str] = list(item.tags)
    try:
        kept = store().set_tags(who, item.id, list(st.session_state.get(key) or []))
    except FolderRefused as exc:
        st.toast(safe_label(str(exc)), icon=":material/error:")
    except ConversationNotFound:
        st.toast("That conversation no longer exists.", icon=":material/error:")
    except StorageError as exc:
        st.toast(safe_label(f"Not saved: {exc}"), icon=":material/error:")
    st.session_state[key] = kept


def _organised(change: Callable[[], object]) -> None:
    try:
        change()
    except (FolderRefused, ConversationNotFound) as exc:
        st.toast(safe_label(str(exc) if isinstance(exc, FolderRefused) else "That conversation no longer exists."),
                 icon=":material/error:")
    except StorageError as exc:
        st.toast(safe_label(f"Not saved: {exc}"), icon=":material/error:")


def _folders(page: str, conversation: Conversation, who: str, folders: list[Folder]) -> None:
    """Make a folder; rename or delete the one the list shows (with its conversations, or leaving them out of any
    folder)."""
    row = st.container(horizontal=True, vertical_alignment="bottom")
    row.text_input("New folder", key="history_new_folder", max_chars=100, placeholder="A name")
    row.button("Make", key="history_make_folder", on_click=_make_folder, args=(who,))  # an empty name is refused
    shown = st.session_state.get(f"history_folder/{page}")
    folder = next((item for item in folders if item.id == shown), None)
    if folder is None:
        st.caption("Choose a folder in the list's filter to rename or delete it." if folders else
                   "No folders yet.")
        return
    rename_key = f"history_rename_folder/{folder.id}/{folder.name}"  # renamed (here or elsewhere): a new box
    st.text_input(safe_label(f"Rename {folder.name}"), value=folder.name, key=rename_key, max_chars=100,
                  on_change=lambda: _organised(lambda: store_of(FolderStore).rename(
                      who, folder.id, st.session_state[rename_key])))
    elsewhere = folder.every_page - folder.conversations
    st.caption(safe_markdown(f"Delete **{folder.name}**: its {folder.conversations} conversations here"
                             + (f" and **{elsewhere} on other pages**" if elsewhere else "")))
    actions = st.container(horizontal=True)
    actions.button("Keep them", key="history_delete_folder", icon=":material/folder_off:",
                   help="Delete the folder; its conversations stay, in no folder.",
                   on_click=_delete_folder, args=(page, conversation, who, folder, False))
    with actions.popover("Delete them too", icon=":material/delete:", type="primary"):
        st.write(safe_markdown(f"Delete **{folder.name}** and its {folder.every_page} conversations, of every page, "
                               "for good?"))
        st.button("Delete", key="history_delete_folder_all", type="primary",
                  on_click=_delete_folder, args=(page, conversation, who, folder, True))


def _make_folder(who: str) -> None:
    name = str(st.session_state.get("history_new_folder") or "")
    try:
        store_of(FolderStore).create(who, name)
    except (FolderRefused, StorageError) as exc:
        st.toast(safe_label(f"Not made: {exc}"), icon=":material/error:")
        return
    st.session_state["history_new_folder"] = ""


def _delete_folder(page: str, conversation: Conversation, who: str, folder: Folder, with_conversations: bool) -> None:
    try:
        changed = store_of(FolderStore).delete(who, folder.id, with_conversations)
    except (FolderRefused, StorageError) as exc:
        st.toast(safe_label(f"Not deleted: {exc}"), icon=":material/error:")
        return
    st.session_state[f"history_folder/{page}"] = ALL_FOLDERS
    for other in (_CONVERSATION_PAGES if with_conversations else ()):
        # A page's open conversation that went with the folder: a new one takes its place (this page's at once).
        if (shown := persistence.binding(other).conversation_id) is None:
            continue
        try:
            store().get(who, shown, with_messages=False)
        except ConversationNotFound:
            persistence.start_new(other, conversation if other == page else state.conversation(other))
            if other == page:
                state.page_changed()
        except StorageError:
            pass
    st.toast(safe_label(f"Deleted the folder {folder.name} " + (
        f"and its {changed} conversations." if with_conversations else f"({changed} conversations kept).")),
        icon=":material/folder_delete:")


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
