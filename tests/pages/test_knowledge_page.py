"""The Knowledge page and the Chat page's choice of collections, through AppTest on the tiny model and the app's
own database: make a collection, see its documents, search it, remove and delete; choose it on the Chat page, and the
question is answered with its passages as sources."""

from __future__ import annotations

import pytest

from app.frontends.streamlit.knowledge_page import CHOSEN
from app.knowledge.ingest import add_file
from app.storage import open_database
from app.storage.knowledge import KnowledgeStore
from tests.helpers import open_app
from tests.knowledge_fixtures import FACTS

KNOWLEDGE_PAGE = "frontends/streamlit/views/knowledge.py"
CHAT_PAGE = "frontends/streamlit/views/chat.py"


@pytest.fixture
def knowledge(database) -> KnowledgeStore:
    """The knowledge store on the database the app uses in this test (DEMO_DATABASE_URL)."""
    engine = open_database()
    yield KnowledgeStore(engine)
    engine.dispose()


def _text(at) -> str:
    return "\n".join(str(e.value) for kind in ("markdown", "caption", "success", "error", "info") for e in
                     getattr(at, kind))


def test_a_collection_is_made_filled_searched_and_deleted(monkeypatch, tiny_model_dir, knowledge):
    with open_app(monkeypatch, tiny_model_dir, page=KNOWLEDGE_PAGE) as at:
        at.text_input(key="knowledge.new_name").set_value("Local history").run()
        at.button(key="knowledge_create").click().run()
        assert "Made the collection **Local history**" in _text(at)
        [collection] = knowledge.collections("local")
        notes = "\n\n".join([FACTS[212][0], "The mill burned down in 1902.", "Sheep were sold at the fair."])
        add_file(knowledge, "local", collection.id, "notes.md", notes.encode())
        at.run()
        table = at.dataframe[0].value
        assert list(table["Document"]) == ["notes.md"] and table["Passages"][0] == 1
        at.text_input(key="knowledge.try").set_value(FACTS[212][1]).run()
        assert any("[1] notes.md · line 1" in str(expander.label) for expander in at.expander)
        at.selectbox(key="knowledge.remove_pick").set_value(knowledge.documents("local", collection.id)[0].id).run()
        at.button(key="knowledge_remove").click().run()
        assert "Removed notes.md." in _text(at) and knowledge.documents("local", collection.id) == []
        at.button(key="knowledge_delete").click().run()
        assert "Deleted the collection **Local history**" in _text(at) and knowledge.collections("local") == []


def test_re_index_reads_the_documents_again_with_the_current_passage_size(monkeypatch, tiny_model_dir, knowledge):
    from app.storage.knowledge import NewPassage

    collection = knowledge.create_collection("local", "Local history")
    notes = "\n\n".join([FACTS[212][0]] + [f"Paragraph {n}: " + "harbour wall repairs " * 40 for n in range(6)])
    document = add_file(knowledge, "local", collection.id, "notes.md", notes.encode())
    knowledge.add_document("local", collection.id, "old.md", "b" * 64, 10, [NewPassage("line 1", "Old notes.")])
    monkeypatch.setenv("DEMO_KNOWLEDGE_PASSAGE_CHARS", "300")
    monkeypatch.setenv("DEMO_KNOWLEDGE_OVERLAP_CHARS", "0")
    with open_app(monkeypatch, tiny_model_dir, page=KNOWLEDGE_PAGE) as at:
        at.button(key="knowledge_reindex").click().run()
        assert not at.exception
        [again] = [d for d in knowledge.documents("local", collection.id) if d.name == "notes.md"]
        assert again.id == document.id and again.passages > document.passages
        said = _text(at)
        assert f"Read 1 of 2 documents of **Local history** again: {again.passages + 1:,} passages in it now " \
               f"(before: {document.passages + 1:,})." in said, said
        assert "old.md has no file kept (added before the app kept files, or through the API and since deleted " \
               "there): remove it and add it again" in said
        table = at.dataframe[0].value
        assert dict(zip(table["Document"], table["Passages"], strict=True))["notes.md"] == again.passages
        at.text_input(key="knowledge.try").set_value(FACTS[212][1]).run()
        assert any("[1] notes.md · line 1" in str(expander.label) for expander in at.expander)


def test_a_collection_chosen_on_the_chat_page_answers_with_sources(monkeypatch, tiny_model_dir, knowledge):
    collection = knowledge.create_collection("local", "Local history")
    add_file(knowledge, "local", collection.id, "notes.md", "\n\n".join(
        [FACTS[37][0], "The mill burned down in 1902.", "Sheep were sold at the fair."]).encode())
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE, max_new_tokens=8) as at:
        at.multiselect(key=CHOSEN).set_value([collection.id]).run()
        at.chat_input[0].set_value(FACTS[37][1]).run()
        assert not at.exception
        question = at.session_state["conversation/chat"].messages[0]
        shown = " ".join(str(expander.label) for expander in at.expander)
        assert "Sources: 1 passage from notes.md" in shown, shown
        assert "Local history" in _text(at)  # the question says it searched the collection
        kinds = [attachment.kind for attachment in question.attachments]
        assert kinds == ["document", "passages"] and question.attachments[1].sources[0].location == "line 1"
        assert "Schooner Marigold" in question.prompt_text().replace("schooner", "Schooner")
        at.multiselect(key=CHOSEN).set_value([]).run()  # un-chosen: the conversation still says what it searches
        assert "This conversation searches **Local history**" in _text(at)


@pytest.fixture(scope="module")
def tiny_embedder(tmp_path_factory):
    from tests.tiny_model import build_tiny_embedder

    return build_tiny_embedder(tmp_path_factory.mktemp("minilm"))


def test_with_an_embedding_model_a_question_in_other_words_still_finds_its_passage(monkeypatch, tiny_model_dir,
                                                                                  knowledge, tiny_embedder):
    monkeypatch.setenv("DEMO_EMBEDDING_MODEL", str(tiny_embedder))
    collection = knowledge.create_collection("local", "Local history")
    add_file(knowledge, "local", collection.id, "notes.md", "\n\n".join(
        [FACTS[37][0], "The mill burned down in 1902.", "Sheep were sold at the fair."]).encode())
    question = "Zyzzyva quokka?"  # no word of it is in the notes: full text alone finds nothing
    assert knowledge.search("local", [collection.id], question, 5) == []
    with open_app(monkeypatch, tiny_model_dir, page=CHAT_PAGE, max_new_tokens=8) as at:
        at.multiselect(key=CHOSEN).set_value([collection.id]).run()
        at.chat_input[0].set_value(question).run()
        assert not at.exception
        asked = at.session_state["conversation/chat"].messages[0]
        assert [attachment.kind for attachment in asked.attachments] == ["document", "passages"]
        from app.knowledge.embeddings import configured_embedder

        model = configured_embedder()
        assert model is not None and knowledge.unembedded("local", model.key, [collection.id]) == []  # all kept
