"""The passages for a question. Before each turn, the passages that best match the question, from the knowledge
the conversation brought in (collections attached whole, long documents), go onto the question as a "passages"
attachment, numbered with their sources, so the model reads them (marked as data, app/domain/conversation.py) and the
page shows what the answer cites."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.domain.conversation import Attachment, Conversation, Source
from app.storage.knowledge import Hit

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
