"""Knowledge on the chat pages: long documents made searchable when attached, the passages for each question put on
it before the turn (app/knowledge/conversation.py), and the sources an answer cites shown under the question.

The store is one per process on the app's database (the conversations' engine); who owns what is the session's
owner (persistence.owner): a visitor who has not signed in has no knowledge, and long documents are cut as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st
from streamlit.elements.lib.mutable_status_container import StatusContainer

from app.agent.attachments import DocumentReader
from app.domain.conversation import Attachment, Conversation
from app.frontends.streamlit import persistence
from app.frontends.streamlit.safe_markdown import safe_label, safe_markdown
from app.knowledge.conversation import LongDocuments
from app.knowledge.passages import add_passages
from app.knowledge.retrieval import Retrieval
from app.knowledge.tool import knowledge_tools
from app.storage.errors import StorageError
from app.storage.knowledge import Hit, KnowledgeStore
from app.tools.documents import document_attachment
from app.tools.tool_registry import ToolRegistry


def store() -> KnowledgeStore:
    """The knowledge store on the conversations' database (StorageError while it cannot be opened)."""
    return persistence.store_of(KnowledgeStore)


def reader() -> DocumentReader:
    """How this session reads an attached document: searchable when long, for a user with knowledge."""
    owner = persistence.owner()
    if owner is None:
        return document_attachment
    try:
        return LongDocuments(store(), owner)
    except StorageError:
        return document_attachment  # no database: read as far as the prompt allows, as before


def passages_for_turn(conversation: Conversation) -> str | None:
    """Before a turn: the passages that answer the question, from the knowledge the conversation brought in; why
    they could not be searched, if they could not (for the page to say)."""
    owner = persistence.owner()
    if owner is None:
        return None
    try:
        retrieval = Retrieval(store())
        shown: list[StatusContainer] = []  # a status line, only while passages are being embedded

        def say(text: str) -> None:
            if shown:
                shown[0].update(label=safe_label(text))
            else:
                shown.append(st.status(safe_label(text), expanded=False))

        def search(collections: Sequence[str], documents: Sequence[str], question: str, limit: int) -> list[Hit]:
            return retrieval.search(owner, collections, question, limit, document_ids=documents, progress=say)

        add_passages(conversation, search)
        if shown:
            shown[0].update(label="Passages embedded for search by meaning", state="complete")
    except StorageError as exc:
        return f"Your documents could not be searched for this question ({exc}); the answer is written without them."
    return None


def render_knowledge(attachment: Attachment) -> bool:
    """A searchable document or retrieved passages, drawn; False for any other attachment."""
    if attachment.kind == "document" and attachment.collection and not attachment.text:
        st.caption(safe_markdown(f":material/manage_search: **{attachment.name}** · {attachment.note}"))
        return True
    if attachment.kind != "passages":
        return False
    with st.expander(safe_label(f":material/format_quote: Sources: {attachment.name}")):
        for source in attachment.sources:
            st.markdown(safe_markdown(f"**[{source.number}]** {source.document} · {source.location}"))
            st.text(source.text)
    return True


def tools() -> ToolRegistry:
    """`search_knowledge` for this session's user, when they keep documents; else no tool (one a model would only
    be tempted by)."""
    owner = persistence.owner()
    if owner is None:
        return ToolRegistry()
    try:
        knowledge = store()
        if not any(collection.documents for collection in knowledge.collections(owner)):
            return ToolRegistry()
    except StorageError:
        return ToolRegistry()
    return knowledge_tools(knowledge, owner)
