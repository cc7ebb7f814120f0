"""Knowledge in a conversation. A document that fits the prompt is read whole, as before; one too long for it is read
into the user's "Attached in chats" collection and searched for each question instead. Before each turn, the
passages that best match the question go onto the question as a "passages" attachment, numbered with their sources,
so the model reads them (marked as data, app/domain/conversation.py) and the page shows what the answer cites.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from app.config import DocumentSettings, KnowledgeSettings
from app.domain.conversation import Attachment, Conversation, Source
from app.knowledge.ingest import add_file
from app.storage.errors import StorageError
from app.storage.knowledge import Hit, KnowledgeRefused, KnowledgeStore
from app.tools.documents import MAX_UPLOAD_BYTES, DocumentError, read_document

CHAT_COLLECTION = "Attached in chats"
PASSAGES_PER_QUESTION = 5
# (collection ids, document ids, question, how many) -> the best passages, best first
Search = Callable[[Sequence[str], Sequence[str], str, int], list[Hit]]


@dataclass
class Scope:
    """Where a conversation's questions are searched: collections attached whole, and single long documents."""

    collections: list[str] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.collections or self.documents)


def scope_of(conversation: Conversation) -> Scope:
    """The knowledge a conversation's messages brought in, in the order it came."""
    scope = Scope()
    for message in conversation.messages:
        for attachment in message.attachments:
            if attachment.kind != "document" or not attachment.collection:
                continue
            if attachment.document_id and attachment.document_id not in scope.documents:
                scope.documents.append(attachment.document_id)
            elif not attachment.document_id and attachment.collection not in scope.collections:
                scope.collections.append(attachment.collection)
    return scope


def add_passages(conversation: Conversation, search: Search, limit: int = PASSAGES_PER_QUESTION) -> Attachment | None:
    """Before a turn: the passages that best answer the last user message, put on it (replacing those an earlier
    run put there: a Regenerate searches again). None when nothing is searched or nothing matched."""
    index = conversation.last_user_index()
    if index is None:
        return None
    message = conversation.messages[index]
    message.attachments = [attachment for attachment in message.attachments if attachment.kind != "passages"]
    scope = scope_of(conversation)
    if not scope or not message.content.strip():
        return None
    hits = search(scope.collections, scope.documents, message.content, limit)
    if not hits:
        return None
    documents = list(dict.fromkeys(hit.document_name for hit in hits))
    attachment = Attachment(
        kind="passages", name=f"{len(hits)} passage{'s' if len(hits) != 1 else ''} from " + ", ".join(documents),
        note="searched for this question",
        sources=[Source(number, hit.document_name, hit.location, hit.text, hit.passage_id)
                 for number, hit in enumerate(hits, 1)])
    message.attachments.append(attachment)
    return attachment


@dataclass
class LongDocuments:
    """Reads an uploaded document for a message: whole when it fits the prompt (DEMO_DOCUMENT_MAX_CHARS), else
    into the owner's "Attached in chats" collection, to be searched. The same file twice is read once."""

    store: KnowledgeStore
    owner: str
    settings: KnowledgeSettings = field(default_factory=KnowledgeSettings.from_env)

    def __call__(self, name: str, data: bytes) -> Attachment:
        name = PurePath(name).name or "document"
        if len(data) > MAX_UPLOAD_BYTES:
            raise DocumentError(f"{name} is {len(data) / 1e6:.1f} MB; files up to {MAX_UPLOAD_BYTES // 2**20} MB "
                                "can be attached to a message. Add larger ones to a collection on the Knowledge page.")
        extracted = read_document(name, data, DocumentSettings.from_env())
        if not extracted.cut:
            text = extracted.text.strip()
            if not text:
                raise DocumentError(f"{name} contains no text.")
            return Attachment(kind="document", name=name, text=text)
        try:
            collection = self.store.collection_named(self.owner, CHAT_COLLECTION)
            known = self.store.find_document(self.owner, collection.id, hashlib.sha256(data).hexdigest())
            document = known or add_file(self.store, self.owner, collection.id, name, data, self.settings)
        except (KnowledgeRefused, DocumentError, StorageError) as exc:
            # Not searchable: read as far as the prompt allows, as before, and say why.
            return Attachment(kind="document", name=name, text=extracted.text,
                              note=f"{extracted.cut}; it could not be made searchable: {exc}")
        return Attachment(
            kind="document", name=name, collection=collection.id, document_id=document.id,
            note=f"too long to read whole ({document.characters:,} characters): searched for each question, "
                 f"{document.passages:,} passages")
