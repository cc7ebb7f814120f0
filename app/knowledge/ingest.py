"""A file into a knowledge collection: read in parts with their locations (reading.py), cut into passages
(chunking.py), stored with the per-user limits and the file itself (app/storage/knowledge.py); and a stored
document read again from its file (a re-index). Every refusal is a KnowledgeRefused or a DocumentError whose message
says what to do."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import PurePath

from app.config import DocumentSettings, KnowledgeSettings
from app.knowledge.chunking import chunk
from app.knowledge.reading import read_parts
from app.storage.knowledge import KnowledgeDocument, KnowledgeLimits, KnowledgeRefused, KnowledgeStore, NewPassage

Progress = Callable[[str], None]  # what is being done now, for a status line


def add_file(store: KnowledgeStore, owner: str, collection_id: str, name: str, data: bytes,
             settings: KnowledgeSettings | None = None, progress: Progress | None = None,
             keep_file: bool = True) -> KnowledgeDocument:
    """Reads `data` (a PDF, DOCX, PPTX, HTML, Markdown or text file) into the collection, keeping the file to read
    it again on a re-index (`keep_file` False: it is kept elsewhere already, as the API's /v1/files are)."""
    settings = settings or KnowledgeSettings.from_env()
    name = PurePath(name).name or "document"
    passages, cut = _passages(name, data, settings, progress)
    limits = KnowledgeLimits(settings.max_documents, settings.max_passages, settings.max_mb)
    return store.add_document(owner, collection_id, name, hashlib.sha256(data).hexdigest(), len(data),
                              passages, note=cut, limits=limits, data=data if keep_file else None)


def read_again(store: KnowledgeStore, owner: str, document: KnowledgeDocument,
               settings: KnowledgeSettings | None = None, progress: Progress | None = None) -> KnowledgeDocument | None:
    """Reads a document's kept file again with the current reader and passage size, replacing its passages (and
    so their vectors: the current embedding model embeds the new ones). None when the app has no file for it (it
    was added before files were kept); the KnowledgeRefused or DocumentError of add_file, with the document
    unchanged, when its file is refused now."""
    settings = settings or KnowledgeSettings.from_env()
    data = store.document_file(owner, document.id)
    if data is None:
        return None
    passages, cut = _passages(document.name, data, settings, progress)
    limits = KnowledgeLimits(settings.max_documents, settings.max_passages, settings.max_mb)
    return store.replace_passages(owner, document.id, passages, note=cut, limits=limits)


def _passages(name: str, data: bytes, settings: KnowledgeSettings,
              progress: Progress | None) -> tuple[list[NewPassage], str]:
    """The file read in parts and cut into passages under the per-file limits; and why reading stopped early ("" when
    it did not)."""
    if len(data) > settings.max_file_mb * 2**20:
        raise KnowledgeRefused(f"{name} is {len(data) / 2**20:,.1f} MB; files up to {settings.max_file_mb:,} MB are "
                               "read into knowledge (DEMO_KNOWLEDGE_MAX_FILE_MB).")
    say = progress or (lambda _: None)
    say(f"Reading {name}")
    said = [time.monotonic()]

    def on_part(count: int) -> None:  # at most twice a second: each update is a message to the browser
        if time.monotonic() - said[0] >= 0.5:
            said[0] = time.monotonic()
            say(f"Reading {name}: {count:,} parts")

    parts, cut = read_parts(name, data, DocumentSettings.from_env(), on_part=on_part,
                            max_chars=settings.max_passages_per_document * settings.passage_chars)
    passages = chunk(parts, settings.passage_chars, settings.overlap_chars)
    if len(passages) > settings.max_passages_per_document:
        raise KnowledgeRefused(
            f"{name} makes {len(passages):,} passages, more than the {settings.max_passages_per_document:,} allowed "
            "for one document (DEMO_KNOWLEDGE_MAX_DOCUMENT_PASSAGES): split it, or ask an administrator.")
    say(f"Storing {len(passages):,} passages of {name}")
    return [NewPassage(passage.location, passage.text) for passage in passages], cut
