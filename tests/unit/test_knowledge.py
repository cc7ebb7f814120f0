"""Knowledge (app/knowledge, app/storage/knowledge.py): documents read in parts with their locations, cut into
passages, stored, and searched by full text in the database itself, on SQLite (FTS5) and on a real PostgreSQL
(tsvector). The long document is a 300-page PDF written in the test, with facts on known pages; the questions are
worded as a person would ask them, not copied from the pages."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import KnowledgeSettings
from app.knowledge.chunking import chunk
from app.knowledge.ingest import add_file
from app.knowledge.reading import read_parts
from app.storage.knowledge import KnowledgeRefused, KnowledgeStore, NewPassage
from app.tools.documents import DocumentError, Part

# Facts on known pages of the long PDF, and a question for each, in other words than the page's.
FACTS = {
    212: ("The keeper of the Ardmore lighthouse was paid eleven shillings a week in 1871.",
          "How much did the lighthouse keeper at Ardmore earn?"),
    37: ("Copper wire for the telegraph line was shipped from Swansea aboard the schooner Marigold.",
         "Which ship carried the telegraph wire?"),
    158: ("The orchard behind the abbey grew forty varieties of pear, the oldest planted by the monks in 1620.",
          "How many kinds of pears were in the abbey orchard?"),
    299: ("The bridge at Kellsford collapsed during the flood of March 1888 and was rebuilt in granite.",
          "What happened to the Kellsford bridge in the flood?"),
}
PAGES = 300


def filler(rng: random.Random, words: int) -> str:
    vocabulary = ("the of and a to in was for on with as by at from that this which were river town road "
                  "field market church house wall mill farm harbour street school winter summer people year "
                  "years parish council trade work boat cart stone timber grain wool cloth fair season").split()
    return " ".join(rng.choice(vocabulary) for _ in range(words)).capitalize() + "."


@pytest.fixture(scope="module")
def long_pdf() -> bytes:
    """300 pages of plausible filler, with FACTS on their pages."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    rng = random.Random(7)
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=A4)
    for page in range(1, PAGES + 1):
        text = pdf.beginText(50, 800)
        lines = [filler(rng, 12) for _ in range(30)]
        if page in FACTS:
            lines.insert(rng.randrange(len(lines)), FACTS[page][0])
        for line in lines:
            text.textLine(line)
        pdf.drawText(text)
        pdf.showPage()
    pdf.save()
    return out.getvalue()


# ----- reading ----------------------------------------------------------------------------------------------------

def test_a_pdf_is_read_page_by_page(long_pdf):
    parts, cut = read_parts("history.pdf", long_pdf)
    assert cut == "" and len(parts) == PAGES
    assert parts[211].location == "page 212" and "eleven shillings" in parts[211].text


def test_html_markdown_and_text_keep_their_headings_and_lines():
    html = b"""<html><head><style>p{}</style><script>alert('x')</script></head><body><nav>Home | About</nav>
        <h1>Install</h1><p>Run <b>make run</b>.</p><h2>Upgrade</h2><ul><li>Pull.</li><li>Run again.</li></ul>
        <pre>line one
  indented</pre></body></html>"""
    parts, _ = read_parts("guide.html", html)
    assert [(p.location, p.text) for p in parts] == [
        ("Install", "Install"), ("Install", "Run make run."), ("Upgrade", "Upgrade"), ("Upgrade", "Pull."),
        ("Upgrade", "Run again."), ("Upgrade", "line one\n  indented")]
    markdown = b"# Guide\n\nIntro text.\n\n## Setup\n\nStep one.\n```\n# not a heading\n```\n"
    parts, _ = read_parts("guide.md", markdown)
    assert [(p.location, p.text) for p in parts] == [
        ("Guide", "Guide"), ("Guide", "Intro text."), ("Setup", "Setup"), ("Setup", "Step one.\n```\n# not a "
                                                                              "heading\n```")]
    parts, _ = read_parts("notes.txt", b"first\nstill first\n\n\nthird para\n")
    assert [(p.location, p.text) for p in parts] == [("line 1", "first\nstill first"), ("line 5", "third para")]


def test_docx_paragraphs_carry_their_heading_and_pptx_its_slides():
    import docx
    import pptx

    document = docx.Document()
    document.add_heading("Budget", level=1)
    document.add_paragraph("Travel costs rose by a third.")
    document.add_heading("Staff", level=1)
    document.add_paragraph("Two people joined.")
    buffer = io.BytesIO()
    document.save(buffer)
    parts, _ = read_parts("report.docx", buffer.getvalue())
    assert [(p.location, p.text) for p in parts] == [("Budget", "Budget"), ("Budget", "Travel costs rose by a third."),
                                                     ("Staff", "Staff"), ("Staff", "Two people joined.")]
    deck = pptx.Presentation()
    for title in ("Plan", "Results"):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
    buffer = io.BytesIO()
    deck.save(buffer)
    parts, _ = read_parts("deck.pptx", buffer.getvalue())
    assert [(p.location, p.text) for p in parts] == [("slide 1", "Plan"), ("slide 2", "Results")]


def test_a_file_with_no_text_is_refused_with_the_reason():
    with pytest.raises(DocumentError, match="contains no text"):
        read_parts("empty.md", b"\n\n   \n")


# ----- passages ---------------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["page 1", "page 2", "Intro"]),
                          st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=3000)),
                max_size=12))
def test_passages_stay_within_their_size_and_location_and_lose_no_word(raw):
    parts = [Part(location, text) for location, text in raw if text.strip()]
    passages = chunk(parts, size=400, overlap=80)
    assert all(len(passage.text) <= 400 for passage in passages)
    # Never across locations: each location's passages hold exactly its words, in order.
    for location in {part.location for part in parts}:
        words = [w for part in parts if part.location == location for w in part.text.split()]
        found = " ".join(passage.text for passage in passages if passage.location == location).split()
        assert set(words) <= set(found)


def test_consecutive_passages_overlap():
    text = " ".join(f"Sentence number {n} says something." for n in range(200))
    passages = chunk([Part("page 1", text)], size=300, overlap=80)
    assert len(passages) > 5
    for before, after in zip(passages, passages[1:], strict=False):
        assert after.text.split()[0] in before.text  # it starts with words the one before ended with


# ----- the store and its search, on SQLite and PostgreSQL ---------------------------------------------------------

@pytest.fixture
def store(engine) -> KnowledgeStore:
    return KnowledgeStore(engine)


def test_a_question_finds_the_page_that_answers_it(store, long_pdf):
    collection = store.create_collection("alice", "Local history")
    steps: list[str] = []
    document = add_file(store, "alice", collection.id, "history.pdf", long_pdf, progress=steps.append)
    assert document.passages >= PAGES and document.note == ""
    assert steps[0] == "Reading history.pdf" and steps[-1].startswith("Storing")
    for page, (_, question) in FACTS.items():
        hits = store.search("alice", [collection.id], question, limit=5)
        assert hits, question
        assert hits[0].location == f"page {page}", (question, [(h.location, h.text[:60]) for h in hits])
        assert hits[0].document_name == "history.pdf" and hits[0].score > 0
    # Another user sees nothing of it, and cannot delete it.
    assert store.search("bob", [collection.id], FACTS[212][1]) == []
    assert store.collections("bob") == [] and not store.delete_collection("bob", collection.id)
    [listed] = store.collections("alice")
    assert (listed.name, listed.documents, listed.passages) == ("Local history", 1, document.passages)


def test_query_syntax_is_never_passed_to_the_database(store):
    collection = store.create_collection("alice", "Notes")
    store.add_document("alice", collection.id, "n.txt", "0" * 64, 10,
                       [NewPassage("line 1", "The quick brown fox jumps over the lazy dog.")])
    for hostile in ['"unbalanced', "fox NEAR(dog", "*", "fox AND", "'; DROP TABLE knowledge_chunks; --",
                    "fox:dog", "^fox", "(((", "fox | dog & !cat", "—", ""]:
        hits = store.search("alice", [collection.id], hostile)
        assert all(hit.document_name == "n.txt" for hit in hits)
    assert store.search("alice", [collection.id], "jumping foxes")[0].location == "line 1"  # stemmed


def test_a_deleted_document_is_no_longer_found_and_the_limits_hold(store):
    collection = store.create_collection("alice", "Notes")
    first = store.add_document("alice", collection.id, "a.txt", "a" * 64, 100,
                               [NewPassage("line 1", "Zebras graze on the savanna.")])
    with pytest.raises(KnowledgeRefused, match="already"):
        store.add_document("alice", collection.id, "copy.txt", "a" * 64, 100, [NewPassage("line 1", "x")])
    with pytest.raises(KnowledgeRefused, match="already have a collection"):
        store.create_collection("alice", " Notes ")
    assert store.search("alice", [collection.id], "zebras")
    assert store.delete_document("alice", first.id)
    assert store.search("alice", [collection.id], "zebras") == []
    tight = KnowledgeSettings(max_passages=3, max_documents=5)
    with pytest.raises(KnowledgeRefused, match="DEMO_KNOWLEDGE_MAX_PASSAGES"):
        add_file(store, "alice", collection.id, "long.txt",
                 "\n\n".join(f"Paragraph {n} " + "word " * 300 for n in range(6)).encode(), settings=tight)
    with pytest.raises(KnowledgeRefused, match="DEMO_KNOWLEDGE_MAX_FILE_MB"):
        add_file(store, "alice", collection.id, "big.txt", b"x" * (2 * 2**20), settings=KnowledgeSettings(
            max_file_mb=1))
    assert store.documents("alice", collection.id) == []  # nothing half-stored
    assert store.delete_collection("alice", collection.id) and store.collections("alice") == []
