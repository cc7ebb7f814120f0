"""Search by words and by meaning (app/knowledge/retrieval.py) on SQLite and a real PostgreSQL server, with a tiny
sentence-embedding model built in the test: reciprocal rank fusion, each passage embedded once per model and its
vector gone with it, owners apart, and a model that fails leaving the search to full text."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import func, select

from app.knowledge.embeddings import Embedded, EmbeddingError, EmbeddingRefused, Kind, LocalEmbedder
from app.knowledge.retrieval import RRF_K, Retrieval, fuse
from app.knowledge.vector_stores import VectorStores
from app.storage.api_files import ApiFileStore
from app.storage.knowledge import Hit, KnowledgeStore, NewPassage
from app.storage.tables import KnowledgeVectorRow
from tests.tiny_model import build_tiny_embedder

FACTS = ["The keeper of the lighthouse was paid eleven shillings a week.",
         "Copper wire for the telegraph was shipped aboard the schooner.",
         "The orchard grew forty varieties of pear.",
         "The bridge collapsed in the flood and was rebuilt in granite."]


class Counting:
    """An embedder that counts the texts it was given (and can be made to fail)."""

    def __init__(self, inner: LocalEmbedder, name: str = "tiny-minilm") -> None:
        self.inner, self.name, self.key, self.documents, self.queries = inner, name, name, 0, 0
        self.failing: type[EmbeddingError] | None = None
        self.refused: set[str] = set()  # texts the model refuses, alone or in a batch
        self.max_tokens, self.dimensions = inner.max_tokens, inner.dimensions

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return self.inner.token_counts(texts)

    def embed(self, texts: Sequence[str], kind: Kind = "document") -> Embedded:
        if self.failing is not None:
            raise self.failing("the model server went away")
        if self.refused & set(texts):
            raise EmbeddingRefused("too long for this server's batch")
        if kind == "document":
            self.documents += len(texts)
        else:
            self.queries += len(texts)
        return self.inner.embed(texts, kind)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> LocalEmbedder:
    return LocalEmbedder(build_tiny_embedder(tmp_path_factory.mktemp("minilm")))


def hit(passage_id: int) -> Hit:
    return Hit(passage_id, "d", "doc", "c", "page 1", "text", 0.0)


def filled(engine, owner: str = "alice", count: int = 300) -> tuple[KnowledgeStore, str, str]:
    """A collection with one document: the FACTS, then register entries up to `count` passages (300: more than one
    embedding batch of 256)."""
    store = KnowledgeStore(engine)
    collection = store.create_collection(owner, "Records")
    passages = [NewPassage(f"page {n + 1}", FACTS[n] if n < len(FACTS) else f"Entry {n} of the register.")
                for n in range(count)]
    document = store.add_document(owner, collection.id, "records.txt", "a" * 64, 1000, passages)
    return store, collection.id, document.id


def vectors(engine, model: str | None = None) -> int:
    with engine.connect() as connection:
        query = select(func.count()).select_from(KnowledgeVectorRow)
        if model is not None:
            query = query.where(KnowledgeVectorRow.model == model)
        return int(connection.scalar(query) or 0)


def test_reciprocal_rank_fusion_adds_each_ranking_s_share():
    fused = fuse([[hit(1), hit(2), hit(3)], [hit(3), hit(4)]], 10)
    assert [h.passage_id for h in fused] == [3, 1, 2, 4]  # 2 and 4 tie at 1/62: the lower id first
    assert fused[0].score == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1))
    assert [h.passage_id for h in fuse([[hit(1), hit(2)]], 1)] == [1]


def test_without_a_model_it_is_the_database_s_full_text_search(engine):
    store, collection, _ = filled(engine, count=12)
    words = store.search("alice", [collection], "lighthouse keeper", 5)
    assert Retrieval(store, lambda: None).search("alice", [collection], "lighthouse keeper", 5) == words
    assert vectors(engine) == 0


def test_with_a_model_each_passage_is_embedded_once_and_meaning_joins_words(engine, tiny):
    store, collection, document = filled(engine)
    model = Counting(tiny)
    retrieval = Retrieval(store, lambda: model)
    found = retrieval.search("alice", [collection], "How much was the lighthouse keeper paid?", 5)
    # The one passage its words match comes first (in both rankings, or first in one and first by id).
    assert len(found) == 5 and found[0].text == FACTS[0]
    assert model.documents == 300 and vectors(engine, "tiny-minilm") == 300  # two batches, each passage once
    retrieval.search("alice", [collection], "Which ship carried the wire?", 5)
    assert model.documents == 300 and model.queries == 2  # nothing embedded twice

    # Words no passage has: full text finds nothing, meaning still ranks passages.
    assert store.search("alice", [collection], "zyzzyva quokka", 5) == []
    assert len(retrieval.search("alice", [collection], "zyzzyva quokka", 5)) == 5

    # Another owner sees none of it, by words or by meaning; a deleted document's vectors go with it.
    assert Retrieval(store, lambda: model).search("mallory", [collection], "lighthouse keeper", 5) == []
    assert store.nearest("mallory", "tiny-minilm", [collection], tiny.embed(["x"]).vectors[0], 5) == []
    assert store.delete_document("alice", document) and vectors(engine) == 0


def test_a_new_passage_or_a_new_model_is_embedded_at_the_next_search(engine, tiny):
    store, collection, _ = filled(engine, count=8)
    first = Counting(tiny)
    Retrieval(store, lambda: first).search("alice", [collection], "pear orchard", 3)
    store.add_document("alice", collection, "more.txt", "b" * 64, 10, [NewPassage("line 1", "A new pear tree.")])
    Retrieval(store, lambda: first).search("alice", [collection], "pear orchard", 3)
    assert first.documents == 9
    other = Counting(tiny, name="another-model")
    Retrieval(store, lambda: other).search("alice", [collection], "pear orchard", 3)
    assert other.documents == 9 and vectors(engine) == 18  # each model's vectors kept apart


def test_a_model_that_fails_leaves_the_search_to_its_words(engine, tiny):
    store, collection, _ = filled(engine, count=8)
    model = Counting(tiny)
    model.failing = EmbeddingError
    words = store.search("alice", [collection], "granite bridge", 5)
    assert Retrieval(store, lambda: model).search("alice", [collection], "granite bridge", 5) == words[:5]

    def unloadable() -> None:
        raise EmbeddingError("no such folder")
    assert Retrieval(store, unloadable).search("alice", [collection], "granite bridge", 5) == words[:5]


def test_the_api_s_vector_store_search_finds_by_meaning_too(engine, tiny):
    store, collection, _ = filled(engine, count=8)
    stores = VectorStores(store, ApiFileStore(engine), embedder=lambda: tiny)
    found = stores.search("alice", [collection], "zyzzyva quokka", 3)
    assert len(found) == 3 and found[0].score == 1.0 and found[0].file_id.startswith("document-")


def test_a_passage_the_model_refuses_is_found_by_its_words_and_the_rest_by_meaning(engine, tiny):
    """Before: the batch holding it was sent again at every search, and nothing in scope was ever embedded."""
    store, collection, _ = filled(engine, count=20)
    model = Counting(tiny)
    model.refused = {FACTS[2]}
    retrieval = Retrieval(store, lambda: model)
    retrieval.search("alice", [collection], "zyzzyva quokka", 5)
    assert vectors(engine) == 20 and store.unembedded("alice", "tiny-minilm", [collection]) == []
    sent = model.documents
    found = retrieval.search("alice", [collection], "How many kinds of pear grew in the orchard?", 5)
    assert model.documents == sent and FACTS[2] in [h.text for h in found[:2]]  # not sent again; found by words


def test_a_database_that_fails_while_embedding_leaves_the_words_ranking(engine, tiny):
    from app.storage.errors import StorageError

    store, collection, _ = filled(engine, count=8)
    words = store.search("alice", [collection], "granite bridge", 5)

    class Locked(KnowledgeStore):
        def add_vectors(self, model, vectors):
            raise StorageError("database is locked")
    locked = Locked(engine)
    assert Retrieval(locked, lambda: Counting(tiny)).search("alice", [collection], "granite bridge", 5) == words


def test_a_long_backlog_is_embedded_within_each_search_s_budget(engine, tiny):
    store, collection, _ = filled(engine, count=600)
    model = Counting(tiny)
    retrieval = Retrieval(store, lambda: model)
    said: list[str] = []
    retrieval.search("alice", [collection], "lighthouse keeper", 5, progress=said.append, budget_s=0.0)
    assert model.documents == 0 and vectors(engine) == 0  # no time given: words and what has vectors
    retrieval.search("alice", [collection], "lighthouse keeper", 5, progress=said.append)
    assert vectors(engine) == 600 and said[-1] == "Embedding passages for search by meaning: 512 of 600"


def test_unrelated_questions_bring_no_passages_by_meaning(engine, tiny):
    store, collection, _ = filled(engine, count=8)
    strict = Retrieval(store, lambda: Counting(tiny), min_similarity=1.01)  # nothing is that close
    assert strict.search("alice", [collection], "zyzzyva quokka", 5) == []
    assert [h.passage_id for h in strict.search("alice", [collection], "granite bridge", 5)] == [
        h.passage_id for h in store.search("alice", [collection], "granite bridge", 5)]
