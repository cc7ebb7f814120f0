"""Knowledge for a headless comparison (`python -m app.compare --collection NAME`): each prompt is searched once in
the named collections of the app's database, and the passages go onto it before the targets get their copies, so
that every target answers from the same passages (as on the Compare page). The report lists them per prompt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine

from app.domain.conversation import Attachment, Conversation, Source
from app.knowledge.passages import add_passages
from app.knowledge.retrieval import Retrieval
from app.storage.knowledge import Collection, Hit, KnowledgeStore


class CollectionsError(ValueError):
    """A named collection the owner does not have (the message lists those they do)."""


@dataclass
class PromptKnowledge:
    store: KnowledgeStore
    owner: str
    collections: list[Collection]

    @classmethod
    def open(cls, engine: Engine, owner: str, names: Sequence[str]) -> PromptKnowledge:
        """The owner's collections called `names` on the app's database; CollectionsError for a name they do not
        have, StorageError when the database cannot be read."""
        store = KnowledgeStore(engine)
        kept = {collection.name: collection for collection in store.collections(owner)}
        missing = [name for name in names if name not in kept]
        if missing:
            have = ", ".join(repr(name) for name in sorted(kept)) or "none"
            raise CollectionsError(f"{owner!r} has no knowledge collection named {missing[0]!r} in the app's database "
                                   f"(DEMO_DATABASE_URL; theirs: {have}): make it on the Knowledge page, or name "
                                   "the owner with --owner")
        return cls(store, owner, [kept[name] for name in dict.fromkeys(names)])

    def add_to(self, conversation: Conversation) -> list[Source]:
        """Put the collections and the passages that best answer the conversation's last user message on it; the
        passages (none when nothing matched)."""
        index = conversation.last_user_index()
        if index is None:
            return []
        conversation.messages[index].attachments.extend(
            Attachment(kind="document", name=collection.name, collection=collection.id,
                       note="knowledge collection, searched for each question") for collection in self.collections)
        retrieval = Retrieval(self.store)

        def search(collection_ids: Sequence[str], document_ids: Sequence[str], question: str, limit: int) -> list[Hit]:
            return retrieval.search(self.owner, collection_ids, question, limit, document_ids=document_ids)

        attachment = add_passages(conversation, search)
        return list(attachment.sources) if attachment is not None else []
