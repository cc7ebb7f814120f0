"""The Knowledge page: a user's named collections of documents (app/storage/knowledge.py), to make, fill, search,
re-index and delete; and on the chat pages, the collections a conversation searches for each question (`chosen`).

Reading a file shows its progress (parts read, passages stored); each file that cannot be read, or passes a limit,
says why, and the others are still added.
"""

from __future__ import annotations

import streamlit as st
from streamlit.elements.lib.mutable_status_container import StatusContainer
from streamlit.runtime.uploaded_file_manager import UploadedFile

from app.clients.memory_fit import describe_bytes
from app.domain.conversation import Attachment, Conversation
from app.frontends.streamlit import persistence
from app.frontends.streamlit.knowledge_chat import store
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.knowledge.conversation import CHAT_COLLECTION
from app.knowledge.embeddings import EmbeddingError
from app.knowledge.ingest import add_file, read_again
from app.knowledge.passages import scope_of
from app.knowledge.reading import READABLE_TYPES
from app.knowledge.retrieval import Retrieval
from app.storage.errors import StorageError
from app.storage.knowledge import Collection, KnowledgeDocument, KnowledgeRefused
from app.tools.documents import DocumentError

_PICKED = "knowledge.collection"
_NOTICE = "knowledge.notice"
_REFUSED = "knowledge.refused"
_ROUND = "knowledge.upload_round"
CHOSEN = "settings.knowledge.chosen"  # the collections the Chat page searches (kept across pages)
COMPARE_CHOSEN = "settings.compare.knowledge"  # those every Compare target answers from
KNOWLEDGE_TYPES = READABLE_TYPES


def render() -> None:
    st.title("Knowledge")
    owner = persistence.owner()
    if owner is None:
        st.info("Sign in to keep documents: knowledge is stored for each user.", icon=":material/login:")
        return
    for key, show in ((_NOTICE, st.success), (_REFUSED, st.error)):
        said = st.session_state.pop(key, None)
        if said:
            show(safe_markdown(said))
    try:
        collections = store().collections(owner)
    except StorageError as exc:
        st.error(safe_markdown(f"The database cannot be reached ({exc}); knowledge is unavailable for now."))
        return
    st.caption("Named sets of documents, searched by their words in the app's database (and by meaning too, where an "
               "embedding model is set up). Choose collections in the Chat or Compare page's sidebar to have each "
               "question answered from them, with sources.")
    head = st.container(horizontal=True, vertical_alignment="bottom")
    by_id = {collection.id: collection for collection in collections}
    picked = head.selectbox("Collection", list(by_id), key=_PICKED, index=0 if by_id else None,
                            format_func=lambda cid: safe_label(by_id[cid].name),
                            placeholder="No collection yet: make one")
    with head.popover("New collection", icon=":material/add:"):
        name = st.text_input("Name", key="knowledge.new_name", max_chars=200)
        st.button("Create", key="knowledge_create", type="primary", on_click=_create, args=(owner, name),
                  disabled=not name.strip())
    if picked in by_id:
        _collection(owner, by_id[picked])


def _collection_label(collection: Collection) -> str:
    plural = "" if collection.documents == 1 else "s"
    return f"{collection.name} · {collection.documents} document{plural} · {collection.passages:,} passages"


def _create(owner: str, name: str) -> None:
    try:
        made = store().create_collection(owner, name)
    except (KnowledgeRefused, StorageError) as exc:
        st.session_state[_REFUSED] = str(exc)
        return
    st.session_state[_PICKED] = made.id
    st.session_state["knowledge.new_name"] = ""
    st.session_state[_NOTICE] = f"Made the collection **{made.name}**: add documents to it below."


def _collection(owner: str, collection: Collection) -> None:
    try:
        _collection_body(owner, collection)
    except StorageError as exc:
        st.error(safe_markdown(f"The database cannot be reached ({exc}); try again in a moment."))


def _collection_body(owner: str, collection: Collection) -> None:
    with st.container(border=True, key="knowledge_collection"):
        st.caption(safe_markdown(_collection_label(collection)))
        round_ = st.session_state.get(_ROUND, 0)  # a new uploader after each Add: the files just added leave it
        uploads = st.file_uploader("Add documents (PDF, DOCX, PPTX, HTML, Markdown, text)", type=KNOWLEDGE_TYPES,
                                   accept_multiple_files=True, key=f"knowledge_files_{collection.id}_{round_}")
        if st.button("Add", icon=":material/upload_file:", key="knowledge_add", type="primary",
                     disabled=not uploads):
            _add(owner, collection, uploads or [])
        documents = store().documents(owner, collection.id)
        if documents:
            st.dataframe([{"Document": d.name, "Size": describe_bytes(d.size_bytes), "Passages": d.passages,
                           "Characters": f"{d.characters:,}", "Added": d.created_at.strftime("%Y-%m-%d %H:%M"),
                           "Note": d.note} for d in documents], hide_index=True, width="stretch")
            row = st.container(horizontal=True, vertical_alignment="bottom")
            names = {d.id: d.name for d in documents}
            gone = row.selectbox("Remove a document", list(names), index=None, key="knowledge.remove_pick",
                                 format_func=lambda did: safe_label(names[did]), placeholder="Pick one")
            row.button("Remove", icon=":material/delete:", key="knowledge_remove", disabled=gone is None,
                       on_click=_remove, args=(owner, gone, names.get(gone or "", "")))
        else:
            st.caption("No documents in it yet.")
        query = st.text_input("Try a search", key="knowledge.try", placeholder="A question, as you would ask it")
        if query.strip():
            hits = Retrieval(store()).search(owner, [collection.id], query, limit=5)
            if not hits:
                st.caption("Nothing in this collection matches those words.")
            for number, hit in enumerate(hits, 1):
                with st.expander(safe_label(f"[{number}] {hit.document_name} · {hit.location}")):
                    st.text(hit.text)
        actions = st.container(horizontal=True)
        if actions.button("Re-index", icon=":material/refresh:", key="knowledge_reindex", disabled=not documents,
                          help="Read every document again from its file, with the current reader and passage size "
                               "(DEMO_KNOWLEDGE_PASSAGE_CHARS), and embed the passages with the current embedding "
                               "model. Searches find a document again as soon as it is read."):
            _reindex(owner, collection, documents)
        with actions.popover("Delete this collection", icon=":material/delete_forever:"):
            st.write(safe_markdown(f"Deletes **{collection.name}** with its {collection.documents} documents. "
                                   "Conversations that searched it keep the sources they showed."))
            st.button("Delete", key="knowledge_delete", type="primary", on_click=_delete,
                      args=(owner, collection))


def _add(owner: str, collection: Collection, uploads: list[UploadedFile]) -> None:
    """Each file read with its progress shown; then the page runs again with the collection's new figures, saying
    what was added and, for each file that was not, why."""
    added, refused = 0, []
    by_words_only = ""  # why search by meaning could not be prepared, if it could not
    for upload in uploads:
        with st.status(safe_label(f"Reading {upload.name}"), expanded=False) as status:
            def say(said: str, status: StatusContainer = status) -> None:
                status.update(label=safe_label(said))

            try:
                add_file(store(), owner, collection.id, upload.name, upload.getvalue(), progress=say)
            except (KnowledgeRefused, DocumentError, StorageError) as exc:
                status.update(label=safe_label(f"{upload.name}: not added"), state="error")
                refused.append(f"{upload.name}: {exc}")
                continue
            added += 1
            try:  # where an embedding model is configured: now, with its progress, rather than at the first search
                Retrieval(store()).embed_missing(owner, [collection.id], progress=say)
            except (EmbeddingError, StorageError) as exc:
                by_words_only = str(exc)
            status.update(label=safe_label(f"{upload.name}: added"), state="complete")
    if added:
        st.session_state[_NOTICE] = f"Added {added} document{'s' if added != 1 else ''} to **{collection.name}**." + (
            f" They are searched by their words only for now: {by_words_only}" if by_words_only else "")
    if refused:
        st.session_state[_REFUSED] = "Not added: " + "; ".join(refused)
    st.session_state[_ROUND] = st.session_state.get(_ROUND, 0) + 1  # a fresh uploader, without these files
    st.rerun()


def _reindex(owner: str, collection: Collection, documents: list[KnowledgeDocument]) -> None:
    """Each document read again from its kept file, with its progress; then the collection's passages embedded by
    the current model; then the page runs again, saying what changed and what could not be read."""
    read, passages, without_file, refused = 0, 0, [], []
    for document in documents:
        with st.status(safe_label(f"Reading {document.name} again"), expanded=False) as status:
            def say(said: str, status: StatusContainer = status) -> None:
                status.update(label=safe_label(said))

            try:
                again = read_again(store(), owner, document, progress=say)
            except (KnowledgeRefused, DocumentError, StorageError) as exc:
                status.update(label=safe_label(f"{document.name}: left as it was"), state="error")
                refused.append(f"{document.name}: {exc}")
                continue
            if again is None:
                without_file.append(document.name)
                status.update(label=safe_label(f"{document.name}: no file kept, left as it was"), state="complete")
                continue
            read, passages = read + 1, passages + again.passages
            status.update(label=safe_label(f"{document.name}: {again.passages:,} passages"), state="complete")
    by_words_only = ""
    with st.status("Embedding passages for search by meaning", expanded=False) as status:
        try:
            Retrieval(store()).embed_missing(owner, [collection.id], progress=lambda said: status.update(
                label=safe_label(said)))
            status.update(state="complete")
        except (EmbeddingError, StorageError) as exc:
            by_words_only = str(exc)
            status.update(state="error")
    try:
        after = store().collection(owner, collection.id)
    except StorageError:
        after = None
    now = f"{after.passages:,} passages in it now" if after is not None else f"{passages:,} passages read"
    said = [f"Read {read} of {len(documents)} documents of **{collection.name}** again: {now} (before: "
            f"{collection.passages:,})."]
    if without_file:
        has, them = ("has", "it") if len(without_file) == 1 else ("have", "them")
        said.append(f"{', '.join(without_file)} {has} no file kept (added before the app kept files, or through "
                    f"the API and since deleted there): remove {them} and add {them} again to read {them} with the "
                    "current settings.")
    if by_words_only:
        said.append(f"The passages are searched by their words only for now: {by_words_only}")
    st.session_state[_NOTICE] = " ".join(said)
    if refused:
        st.session_state[_REFUSED] = "Left as they were: " + "; ".join(refused)
    st.rerun()


def _remove(owner: str, document_id: str | None, name: str) -> None:
    if document_id and store().delete_document(owner, document_id):
        st.session_state[_NOTICE] = f"Removed {name}."
    st.session_state["knowledge.remove_pick"] = None


def _delete(owner: str, collection: Collection) -> None:
    store().delete_collection(owner, collection.id)
    st.session_state.pop(_PICKED, None)
    st.session_state[_NOTICE] = f"Deleted the collection **{collection.name}**."


# ----- on the chat pages -------------------------------------------------------------------------------------------

_CHOSEN_HELP = "Each question from now on is answered from these collections too, with sources. Manage them on the " \
               "Knowledge page."


def choose_in_sidebar(conversation: Conversation, key: str = CHOSEN, disabled: bool = False,
                      help: str = _CHOSEN_HELP) -> None:
    """The collections the next questions search, in the page's sidebar section (owners only), and those the
    conversation searches already (chosen for an earlier question, they stay with it). `key`: where the choice is
    kept (the Chat page's, or the Compare page's own)."""
    owner = persistence.owner()
    if owner is None:
        return
    try:
        collections = [c for c in store().collections(owner) if c.name != CHAT_COLLECTION]
    except StorageError:
        return
    if not collections:
        return
    by_id = {collection.id: collection for collection in collections}
    st.session_state[key] = [cid for cid in st.session_state.get(key, []) if cid in by_id]
    st.multiselect("Search my knowledge", list(by_id), key=key, disabled=disabled,
                   format_func=lambda cid: safe_label(by_id[cid].name),
                   help=help)
    already = [by_id[cid].name for cid in scope_of(conversation).collections if cid in by_id]
    if already:
        st.caption(safe_markdown("This conversation searches " + ", ".join(f"**{name}**" for name in already)
                                 + ": chosen for an earlier question, they stay with it."))


def attach_chosen(conversation: Conversation, key: str = CHOSEN) -> str | None:
    """Puts the collections chosen under `key` that the conversation does not search yet on its last user message:
    from there on, the conversation searches them (and a refresh or an export keeps that). Why they could not be
    put there, if they could not (for the page to say)."""
    chosen = [cid for cid in st.session_state.get(key, []) if isinstance(cid, str)]
    index = conversation.last_user_index()
    if not chosen or index is None:
        return None
    searched = scope_of(conversation).collections
    owner = persistence.owner()
    if owner is None:
        return None
    try:
        names = {c.id: c.name for c in store().collections(owner)}
    except StorageError as exc:  # the question goes out without them, and the page says so
        return f"The collections you chose could not be searched for this question ({exc}); the answer is written " \
               "without them."
    for cid in chosen:
        if cid not in searched and cid in names:
            conversation.messages[index].attachments.append(Attachment(
                kind="document", name=names[cid], collection=cid, note="knowledge collection, searched for each "
                                                                       "question"))
    return None

