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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.config import KnowledgeSettings
from app.knowledge.embeddings import Embedder, EmbeddingError, EmbeddingRefused, configured_embedder
from app.storage.errors import StorageError
from app.storage.knowledge import Hit, KnowledgeStore

log = logging.getLogger(__name__)

RRF_K = 60  # reciprocal rank fusion's constant (Cormack, Clarke and Buettcher, 2009), Elasticsearch's default too
_POOL = 20  # each ranking's candidates: the fused best come from these
_EMBED_BATCH = 256  # passages read, embedded and stored per step
# How long one search may spend embedding passages that have no vector yet (a long document attached in a chat, a
# file added through the API): the rest are embedded by the next searches, meanwhile found by their words.
SEARCH_EMBED_BUDGET_S = 10.0


def _embedded(embedder: Embedder, batch: list[tuple[int, str]]) -> list[tuple[int, bytes]]:
    """The batch's vectors (float32, little-endian); if the model refuses the batch, each passage alone, and one
    it refuses by itself gets an empty vector: marked as tried, found by its words only."""
    def packed(vector: Sequence[float]) -> bytes:
        return np.asarray(vector, dtype="<f4").tobytes()

    try:
        vectors = embedder.embed([text for _, text in batch], "document").vectors
        return [(passage_id, packed(vector)) for (passage_id, _), vector in zip(batch, vectors, strict=True)]
    except EmbeddingRefused:
        if len(batch) == 1:
            return [(batch[0][0], b"")]
    return [pair for single in batch for pair in _embedded(embedder, [single])]


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
    # Passages less similar than this to the question are not among its meaning's candidates: a question like
    # "thanks" then brings no passages. For normalized sentence embeddings (MiniLM and the like), unrelated
    # sentences score about 0 to 0.2 and related ones 0.4 and up.
    min_similarity: float = field(default_factory=lambda: KnowledgeSettings.from_env().min_similarity)

    def search(self, owner: str, collection_ids: Sequence[str], query: str, limit: int = 5,
               document_ids: Sequence[str] = (), progress: Callable[[str], None] | None = None,
               budget_s: float = SEARCH_EMBED_BUDGET_S) -> list[Hit]:
        """The best passages for `query` in the owner's collections (and single documents), best first.
        Passages not embedded yet are embedded first for at most `budget_s` (the rest at the next searches: this
        one ranks by meaning what has vectors); `progress` hears how that goes, only when there are some."""
        limit = max(1, min(int(limit), 50))
        if not query.strip() or not (collection_ids or document_ids):
            return []
        pool = max(limit, _POOL)
        by_words = self.store.search(owner, collection_ids, query, pool, document_ids)
        embedder = self._embedder()
        if embedder is None:
            return by_words[:limit]
        try:
            self.embed_missing(owner, collection_ids, document_ids, progress, embedder,
                               deadline=time.monotonic() + budget_s)
            wanted = embedder.embed([query], "query").vectors[0]
            by_meaning = self.store.nearest(owner, embedder.key, collection_ids, wanted, pool, document_ids)
        except (EmbeddingError, StorageError) as exc:  # the words' ranking still answers the question
            log.warning("Searching by meaning failed, by words only: %s", exc)
            return by_words[:limit]
        close = [hit for hit in by_meaning if hit.score >= self.min_similarity]  # "thanks" matches nothing
        return fuse([by_words, close], limit)

    def embed_missing(self, owner: str, collection_ids: Sequence[str], document_ids: Sequence[str] = (),
                      progress: Callable[[str], None] | None = None, embedder: Embedder | None = None,
                      deadline: float | None = None) -> int:
        """Gives the passages in scope their vectors by the embedding model, if one is configured, until
        `deadline` (time.monotonic(); None: all of them); how many were stored. A passage the model refuses (too
        long for a server's batch, say) is marked so, and searched by its words only; EmbeddingError when the model
        fails, StorageError when the database does."""
        embedder = embedder or self._embedder()
        if embedder is None:
            return 0
        done, total = 0, 0
        while batch := self.store.unembedded(owner, embedder.key, collection_ids, document_ids, _EMBED_BATCH):
            if deadline is not None and time.monotonic() >= deadline:
                break
            if progress is not None:
                total = total or done + self.store.unembedded_count(owner, embedder.key, collection_ids,
                                                                    document_ids)
                progress(f"Embedding passages for search by meaning: {done:,} of {total:,}")
            stored = self.store.add_vectors(embedder.key, _embedded(embedder, batch))
            done += stored
            if not stored:
                break  # another process is embedding the same passages (or they were deleted): it goes on
        return done

    def _embedder(self) -> Embedder | None:
        try:
            return self.embedder()
        except EmbeddingError as exc:
            log.warning("The embedding model is unavailable, searching by words only: %s", exc)
            return None
