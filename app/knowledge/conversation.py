"""Long documents in a conversation. A document that fits the prompt is read whole, as before; one too long for it is
read into the user's "Attached in chats" collection and searched for each question instead (app/knowledge/passages.py
puts the passages that answer each question on it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import PurePath

from app.config import DocumentSettings, KnowledgeSettings
from app.domain.conversation import Attachment
from app.knowledge.ingest import add_file
from app.storage.errors import StorageError
from app.storage.knowledge import KnowledgeRefused, KnowledgeStore
from app.tools.documents import MAX_UPLOAD_BYTES, DocumentError, read_document

CHAT_COLLECTION = "Attached in chats"


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
