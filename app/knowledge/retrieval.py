"""Finding the passages that answer a question: by its words (the database's full-text search, always there, offline on
first run) and, where a sentence-embedding model is configured (app/knowledge/embeddings.py), by its meaning too,
the two rankings fused by reciprocal rank. Every search of the app goes through here: the Chat's passages, the
Knowledge page, `search_knowledge`, the API's vector store search and file_search.

Passages get their vectors the first time a search with that model reaches them (and on the Knowledge page right
after an upload, with its progress), so documents read before a model was configured, or under another model, are
embedded when next searched: one mechanism for new documents, old ones and a change of model. A model that cannot
load or answer leaves the search to full text, with a warning in the log: the question is still answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.knowledge.embeddings import Embedder, EmbeddingError, configured_embedder
from app.storage.knowledge import Hit, KnowledgeStore

log = logging.getLogger(__name__)

RRF_K = 60  # reciprocal rank fusion's constant (Cormack, Clarke and Buettcher, 2009), Elasticsearch's default too
_POOL = 20  # each ranking's candidates: the fused best come from these
_EMBED_BATCH = 256  # passages read, embedded and stored per step


def fuse(rankings: Sequence[Sequence[Hit]], limit: int) -> list[Hit]:
    """Reciprocal rank fusion: each passage scores the sum of 1 / (RRF_K + its rank) over the rankings it is in;
    best first (ties by passage id, so the order is stable). Each hit keeps its first ranking's fields."""
    scores: dict[int, float] = {}
    hits: dict[int, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, 1):
            scores[hit.passage_id] = scores.get(hit.passage_id, 0.0) + 1.0 / (RRF_K + rank)
            hits.setdefault(hit.passage_id, hit)
    best = sorted(scores, key=lambda passage_id: (-scores[passage_id], passage_id))[:max(0, limit)]
    return [replace(hits[passage_id], score=scores[passage_id]) for passage_id in best]


@dataclass
class Retrieval:
    """Search over one knowledge store; `embedder` gives the configured embedding model (None: full text only)."""

    store: KnowledgeStore
    embedder: Callable[[], Embedder | None] = field(default=configured_embedder)

    def search(self, owner: str, collection_ids: Sequence[str], query: str, limit: int = 5,
               document_ids: Sequence[str] = (), progress: Callable[[str], None] | None = None) -> list[Hit]:
        """The best passages for `query` in the owner's collections (and single documents), best first.
        `progress` hears how the embedding of passages not embedded yet goes (only when there are some)."""
        limit = max(1, min(int(limit), 50))
        if not query.strip() or not (collection_ids or document_ids):
            return []
        pool = max(limit, _POOL)
        by_words = self.store.search(owner, collection_ids, query, pool, document_ids)
        embedder = self._embedder()
        if embedder is None:
            return by_words[:limit]
        try:
            self.embed_missing(owner, collection_ids, document_ids, progress, embedder)
            wanted = embedder.embed([query], "query").vectors[0]
        except EmbeddingError as exc:
            log.warning("Searching by meaning failed, by words only: %s", exc)
            return by_words[:limit]
        by_meaning = self.store.nearest(owner, embedder.name, collection_ids, wanted, pool, document_ids)
        return fuse([by_words, by_meaning], limit)

    def embed_missing(self, owner: str, collection_ids: Sequence[str], document_ids: Sequence[str] = (),
                      progress: Callable[[str], None] | None = None, embedder: Embedder | None = None) -> int:
        """Gives every passage in scope its vector by the embedding model, if one is configured; how many were
        embedded. EmbeddingError when the model fails."""
        embedder = embedder or self._embedder()
        if embedder is None:
            return 0
        done = 0
        while batch := self.store.unembedded(owner, embedder.name, collection_ids, document_ids, _EMBED_BATCH):
            if progress is not None:
                progress(f"Embedding passages for search by meaning: {done:,} done")
            vectors = embedder.embed([text for _, text in batch], "document").vectors
            stored = self.store.add_vectors(embedder.name, [
                (passage_id, np.asarray(vector, dtype="<f4").tobytes())
                for (passage_id, _), vector in zip(batch, vectors, strict=True)])
            done += len(batch)
            if not stored:
                break  # another process is embedding the same passages (or they were deleted): it goes on
        return done

    def _embedder(self) -> Embedder | None:
        try:
            return self.embedder()
        except EmbeddingError as exc:
            log.warning("The embedding model is unavailable, searching by words only: %s", exc)
            return None
